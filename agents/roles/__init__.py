"""The roles' decisions, one module each: the seed step and first-kernel writer (`seed_step.py`), selection and
the branches' inputs (`selection.py`), the analyst (`analyst_step.py`), the strategist (`strategist_step.py`), the
review between strategist and coder (`review_step.py`), the coder and its quick check (`coder_step.py`), the
verifier step with tuning and the fresh-draw confirmation (`verifier_step.py`) and the archive step
(`archiving.py`); what several share is in `common.py`. (A module is never named as the function it holds: the
package exports the functions under those names.)

Each role takes the small state it needs (a plain dict) and the run's `RunContext`, does its work through
tools (the run store, evaluation, the coder's tools) and returns a small update. Nothing here knows
LangGraph: `graphs/nodes.py` adapts these functions into graph nodes. Each of the analyst, strategist
and coder has two policies, the builtin one (no model) and the language-model one (`llm.py`), chosen per
role by the run's config (`model`, `role_models`). This package's namespace is what the graph, the API and the
tests call; the stop rules and the run's status words are `stopping`'s (re-exported for them).
"""

from __future__ import annotations

from ..stopping import STOPPED_ON_REQUEST, counted_steps
from .analyst_step import analyst
from .archiving import archive_step, provider_failure, spent_so_far
from .coder_step import coder, quick_check
from .common import State
from .review_step import apply_review, review_request
from .seed_step import SEED_REPAIRS, seed
from .selection import branch_inputs, plateaued, select, tuning_seen
from .strategist_step import strategist
from .verifier_step import verifier

__all__ = ["SEED_REPAIRS", "STOPPED_ON_REQUEST", "State", "analyst", "apply_review", "archive_step", "branch_inputs",
           "coder", "counted_steps", "plateaued", "provider_failure", "quick_check", "review_request", "seed",
           "select", "spent_so_far", "strategist", "tuning_seen", "verifier"]
