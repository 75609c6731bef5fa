"""The ``stint`` command. Each layer adds its own sub-commands through a ``register(app)`` hook.

``main`` sends ``stint sim`` straight to ``stint.sim.cli.main`` (argparse; the Typer app, the
runtime and the server stack are not imported for it), so a simulation starts in milliseconds.
Everything else goes through the Typer ``app``, built on first use (``stint.cli.app``). Hooks
import only Typer at module level and heavy modules (torch, ray, the store) inside the command
bodies, so ``stint --help`` stays fast.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer


@cache
def _app() -> typer.Typer:
    import typer

    from stint.experiments.cli import register as register_experiments
    from stint.runtime.cli import register as register_runtime
    from stint.sim.cli import register as register_sim

    app = typer.Typer(
        name="stint",
        help="Scheduler for deep-learning training clusters: simulate policies, run jobs, reproduce papers.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    register_sim(app)
    register_experiments(app)
    register_runtime(app)

    @app.command()
    def policies(
        options: bool = typer.Option(False, "--options", help="Also list each policy's --policy-opt keys."),
    ) -> None:
        """List the registered scheduling policies."""
        from stint.policies import available
        from stint.policies.registry import options_of

        for name in available():
            typer.echo(name)
            if options:
                for key, kind in options_of(name).items():
                    typer.echo(f"  {key}: {kind}")

    return app


def __getattr__(name: str) -> object:
    """``stint.cli.app``: the Typer app, built when first asked for."""
    if name == "app":
        return _app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    if sys.argv[1:2] == ["sim"]:
        from stint.sim.cli import main as sim_main

        raise SystemExit(sim_main(sys.argv[2:]))
    _app()()
