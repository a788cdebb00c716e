"""The PDD router's entry point, `python -m pddbench.live.pdd_router` (the router itself:
pddbench/live/router/)."""

from pddbench.live.router.app import main, make_app
from pddbench.live.router.config import RouterConfig, Trip

__all__ = ["RouterConfig", "Trip", "main", "make_app"]

if __name__ == "__main__":
    main()
