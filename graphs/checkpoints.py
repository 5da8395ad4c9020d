"""A run's LangGraph checkpoints kept bounded (issue 24): a night of ten thousand steps wrote about 84 KB of
checkpoints per step (850 MB), and LangGraph's SqliteSaver never deletes one.

What a run needs from its checkpoints is the latest one (a resume goes on from it, with its pending writes and
any review the run waits on); what a person may want beyond that is the recent history (Studio's time travel
over the last generations). The step-by-step record of a run does not live here: the trace, the transcripts
and the kernels keep every step for good. So at the end of each generation `Pruner` deletes every checkpoint
(and its pending writes, in every namespace: the branches' subgraphs too) older than the root checkpoint that
ended the generation `KEEP_GENERATIONS` back. Checkpoint ids are time-ordered (LangGraph's own "latest" is
the greatest id), so "older" is a comparison of ids. SQLite reuses the freed pages: the file stops growing.
"""

from __future__ import annotations

from collections import deque
from typing import Any

KEEP_GENERATIONS = 16
"""generations of checkpoint history kept behind the latest (Studio's time travel reaches this far back)"""


class Pruner:
    """Deletes a run's old checkpoints through its SqliteSaver (under the saver's own lock), one call per
    generation ended. The ids it remembers belong to this driver of the run: a resumed run starts counting
    again, so at most `keep` more generations of history survive a resume until pruning catches up."""

    def __init__(self, saver: Any, thread_id: str, keep: int | None = None) -> None:
        self.saver, self.thread_id = saver, thread_id
        self.keep = KEEP_GENERATIONS if keep is None else keep
        self._ends: deque[str] = deque(maxlen=self.keep + 1)
        self.deleted = 0
        """checkpoints deleted by this pruner (for tests and figures)"""

    def generation_ended(self) -> int:
        """Remember the root checkpoint that ended a generation; once more than `keep` are remembered, delete
        everything older than the oldest of them. Returns the number of checkpoints deleted."""
        with self.saver.cursor() as cur:
            cur.execute("SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''",
                        (self.thread_id,))
            latest = cur.fetchone()[0]
            if latest is None or (self._ends and self._ends[-1] == latest):
                return 0
            self._ends.append(latest)
            if len(self._ends) <= self.keep:
                return 0
            cutoff = self._ends[0]
            cur.execute("DELETE FROM writes WHERE thread_id = ? AND checkpoint_id < ?", (self.thread_id, cutoff))
            cur.execute("DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id < ?", (self.thread_id, cutoff))
            n = cur.rowcount
        self.deleted += max(n, 0)
        return max(n, 0)
