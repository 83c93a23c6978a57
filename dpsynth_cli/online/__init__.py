"""Online (continual-release) synthetic data: dissertation ch. 5, Algorithms 10-12.

`replay` is the library entry point of `dpsynth online-replay`; `PRIVACY_MODEL` is the text the
CLI's --help, the README and the report use. Modules: `params` (time levels, (5.3)/(5.12)),
`geometric` (exact first-firing times), `counters` (event-driven Algorithm 11), `literal` (the
step-by-step oracle), `engine` (Algorithm 12 on the binary partition), `marginals` (the
marginals mechanism released continually) and `schedule` (its node schedules), `state` (secret,
atomic `--state`), `replay` (checkpoints, releases, report).
"""

from dpsynth_cli.online.engine import OnlineEngine, apriori_bound
from dpsynth_cli.online.params import OnlinePlan
from dpsynth_cli.online.replay import (
    PRIVACY_MODEL,
    ReplayOptions,
    ReplayResult,
    parse_checkpoints,
    replay,
)

__all__ = [
    "PRIVACY_MODEL",
    "OnlineEngine",
    "OnlinePlan",
    "ReplayOptions",
    "ReplayResult",
    "apriori_bound",
    "parse_checkpoints",
    "replay",
]
