"""The ``stint`` command. Each layer adds its own sub-commands through a ``register(app)`` hook.

Hooks import only Typer at module level and import heavy modules (torch, ray, the store) inside
the command bodies, so ``stint --help`` stays fast.
"""

from __future__ import annotations

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


def main() -> None:
    app()
