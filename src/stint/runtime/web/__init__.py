"""The web dashboard ``stint serve`` serves under ``/ui`` (``mount``; see ``pages``)."""

from stint.runtime.web.pages import mount

__all__ = ["mount"]
