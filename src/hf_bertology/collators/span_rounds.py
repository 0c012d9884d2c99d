"""The vectorised rounds of span masking (`collators.spans.DataCollatorForSpanMasking.sample_spans`).

The official procedures place one span at a time (SpanBERT `span_masking`, ALBERT `create_masked_lm_predictions`);
here a round tries many anchors of every row at once and finds which ones the sequential loop would take as the
fixed point of its rule: anchor j's fate depends only on the anchors before it (a lower-triangular system with one
solution), so the masks are exactly the loop's. Kept apart from the collator so that `spans.py` reads as the two
papers' procedures and this module as the one piece of machinery that makes them fast; `tests/test_span_collator.py::
test_rounds_mask_exactly_as_one_anchor_at_a_time` checks every row against a plain one-anchor-at-a-time loop.
"""

from __future__ import annotations

import torch

from .base import Draws

# Spans tried per row per vectorised round, beyond the budget left divided by the mean span length in words; at
# most MAX_ANCHORS_PER_ROUND (a round's cost grows with its square: long rows take more rounds instead).
MIN_ANCHORS_PER_ROUND, MAX_ANCHORS_PER_ROUND = 8, 64
# ALBERT: anchors tried one at a time per round once the budget starts to bind (after that, the next round).
TAIL_ANCHORS = 6


class SpanRounds:
    """One round of span placement per call, for a collator that has `sample_lengths(draws, anchors)`,
    `_mean_words` (mean span length in words), `span_upper` (longest span in words) and `scheme`. Each step takes
    the working `state` of `sample_spans` (scores, masked, remaining budget, word tables), updates it in place and
    returns the rows that can go on."""

    def _anchors_per_round(self, remaining: torch.Tensor, length: int) -> int:
        """Anchors to try per row this round: enough for the largest budget left in most rows (a span adds about
        `mean_span_length` words), so that most rows finish in one round; rows that need more get another."""
        wanted = int(int(remaining.max()) / self._mean_words) + MIN_ANCHORS_PER_ROUND
        return min(length, wanted, MAX_ANCHORS_PER_ROUND)

    def _spanbert_step(self, state, positions, spans) -> torch.Tensor:
        """Place the next spans of every row that still has budget, exactly as the official loop would one after
        the other; returns the rows that can go on.

        The round's K anchors are taken at once: anchor j is rejected when it lies in an accepted earlier span of
        the round. That is a lower-triangular system (j depends only on i < j) with one solution, found by
        iterating to a fixed point (a few passes over `(B, K, K)`). Each token then goes to the first accepted span
        covering it (a scatter of the spans' own tokens, not a `(B, K, L)` cover), and spans are added in order
        until the budget is met.
        """
        scores, masked, remaining = state["scores"], state["masked"], state["remaining"]
        batch, length = masked.shape
        k = self._anchors_per_round(remaining, length)
        best, anchor = scores.topk(k, 1, largest=False)  # (B, K): the next unmasked tokens in the random order
        n = self.sample_lengths(Draws(state["keys"]), anchor)  # (B, K)
        word = state["word_id"].gather(1, anchor)
        start = state["word_start_pos"].gather(1, word)
        stop = state["segment_end"].gather(1, start)  # a span ends at the next special token or padding
        end = torch.minimum(state["word_start_pos"].gather(1, (word + n).clamp(max=length)), stop)
        valid = (best < 2.0) & (remaining > 0)[:, None]
        # inside[b, j, i]: anchor j lies in span i < j (the official loop rejects an anchor already masked).
        earlier = torch.ones(k, k, dtype=torch.bool).tril(-1)
        inside = (start[:, None, :] <= anchor[..., None]) & (anchor[..., None] < end[:, None, :]) & earlier
        inside &= valid[:, None, :]
        accepted = valid
        for _ in range(k):
            update = valid & ~(inside & accepted[:, None, :]).any(2)
            if torch.equal(update, accepted):
                break
            accepted = update
        # The accepted spans' tokens as flat (row, position) slots, each tagged with its span index.
        size = (end - start) * accepted  # (B, K)
        counts = size.flatten()
        slot = torch.repeat_interleave(torch.arange(batch * k), counts)  # (N,) the span (row-major) of each entry
        offset = torch.arange(len(slot)) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        flat = (slot // k) * length + start.flatten()[slot] + offset
        first = torch.full((batch * length,), k, dtype=torch.long)
        first.scatter_reduce_(0, flat, slot % k, "amin")  # the first span covering each token (k: none)
        first = first.view(batch, length).masked_fill_(masked, k)  # tokens masked earlier are not new
        covered = first < k
        new_per_span = torch.zeros(batch, k + 1, dtype=torch.long).scatter_add_(1, first, torch.ones_like(first))
        total = new_per_span[:, :k].cumsum(1)  # (B, K)
        # Spans are added in order until the budget is met; the span that meets it adds its first new tokens only.
        cut = (total < remaining[:, None]).sum(1)  # (B,) index of the span that meets the budget (k: none)
        before = torch.where(cut > 0, total.gather(1, (cut[:, None] - 1).clamp(min=0)).squeeze(1), 0)
        in_cut = first == cut[:, None]
        taken = covered & ((first < cut[:, None]) | (in_cut & (in_cut.cumsum(1) <= (remaining - before)[:, None])))
        masked |= taken
        scores.masked_fill_(taken, 2.0)
        if spans is not None:
            cut_end = torch.where(in_cut & taken, positions + 1, 0).amax(1)
            index = torch.arange(k)
            end = torch.where(index == cut[:, None], cut_end[:, None], end)
            rows, slots = (accepted & (index <= cut[:, None])).nonzero(as_tuple=True)
            spans.append(torch.stack([state["rows"][rows], start[rows, slots], end[rows, slots], n[rows, slots]], 1))
        remaining -= taken.sum(1)
        return (remaining > 0) & (best[:, -1] < 2.0)

    def _albert_step(self, state, positions, spans) -> torch.Tensor:
        """Try the next word starts of every row that still has budget, with the outcome of the official loop
        trying them one after the other; returns the rows that can go on.

        Whether n-gram j is taken, and how far it reaches, depends on the n-grams taken before it (overlap, budget
        left). Ignoring the budget, that is a lower-triangular system with one solution, found by iterating to a
        fixed point over the round's K anchors at once (`_first_guess`); it is the official outcome up to the
        first anchor whose drawn n-gram no longer fits the budget left. From that anchor on, `TAIL_ANCHORS` anchors
        are tried one at a time (shorter n-grams, skips), and the round's later anchors wait for the next round.
        """
        scores, masked, remaining = state["scores"], state["masked"], state["remaining"]
        batch, length = masked.shape
        # Anchors that could only be skipped: covered word starts and first words longer than the budget left.
        scores.masked_fill_(masked | (state["word_len"] > remaining[:, None]), 2.0)
        k = self._anchors_per_round(remaining, length)
        best, anchor = scores.topk(k, 1, largest=False)
        n = self.sample_lengths(Draws(state["keys"]), anchor)  # (B, K)
        word = state["word_id"].gather(1, anchor)
        start = state["word_start_pos"].gather(1, word)  # (B, K)
        stop = state["segment_end"].gather(1, start)
        offsets = torch.arange(1, self.span_upper + 1)
        # ends[b, j, m-1]: end of the m-gram from anchor j (cut at the next special token).
        ends = state["word_start_pos"].gather(1, (word[..., None] + offsets).clamp(max=length).view(batch, -1))
        ends = torch.minimum(ends.view(batch, k, -1), stop[..., None])  # (B, K, U)
        wanted = offsets <= n[..., None]  # (B, K, U)
        masked_before = torch.nn.functional.pad(masked.long().cumsum(1), (1, 0))  # (B, L + 1) prefix counts
        valid = best < 2.0
        # First guess, ignoring the budget: every anchor with the n-gram it drew, unless it meets an earlier one.
        full = ends.gather(2, (n - 1)[..., None]).squeeze(2)
        base = valid & (masked_before.gather(1, full) == masked_before.gather(1, start))
        accepted = self._first_guess(start, full, base, length)
        # That is the official outcome up to the first anchor whose n-gram the budget would shorten or skip (t).
        size = (full - start) * accepted
        left = remaining[:, None] - (size.cumsum(1) - size)  # (B, K) budget left when anchor j is tried
        binding = valid & (full - start > left)
        t = torch.where(binding.any(1), binding.byte().argmax(1), k)  # (B,)
        column = torch.arange(k)
        accepted &= column < t[:, None]
        end = torch.where(accepted, full, start)
        remaining -= (end - start).sum(1)
        masked |= self._cover(start, end, accepted, length)
        # From t on, a few anchors one at a time with the official rule; the round's later anchors wait for the next.
        masked_before = torch.nn.functional.pad(masked.long().cumsum(1), (1, 0))
        columns = t[:, None] + torch.arange(TAIL_ANCHORS)  # (B, T) the columns tried one at a time
        tail = columns.clamp(max=k - 1)
        tail_start, tail_valid = start.gather(1, tail), valid.gather(1, tail) & (columns < k)
        tail_ends = ends.gather(1, tail[..., None].expand(-1, -1, ends.shape[2]))  # (B, T, U)
        tail_sizes = tail_ends - tail_start[..., None]  # tokens of each m-gram
        tail_wanted = wanted.gather(1, tail[..., None].expand(-1, -1, ends.shape[2]))
        # which m-grams touch no masked token (the prefix's n-grams, earlier rounds): all at once, before the loop
        tail_clear = masked_before.gather(1, tail_ends.view(batch, -1)).view_as(tail_ends)
        tail_clear = tail_clear == masked_before.gather(1, tail_start)[..., None]  # (B, T, U)
        tail_end = torch.full_like(tail_start, -1)  # -1: not taken (overlaps nothing)
        for c in range(TAIL_ANCHORS):
            s = tail_start[:, c]
            # The longest m <= n that fits the budget (the official "try shorter n-grams"), else skip.
            fits = tail_wanted[:, c] & (tail_sizes[:, c] <= remaining[:, None])  # (B, U), a prefix
            m = (fits.sum(1, keepdim=True) - 1).clamp(min=0)
            e = tail_ends[:, c].gather(1, m).squeeze(1)
            ok = tail_valid[:, c] & fits[:, 0] & tail_clear[:, c].gather(1, m).squeeze(1)
            ok &= ~((tail_start[:, :c] < e[:, None]) & (s[:, None] < tail_end[:, :c])).any(1)  # this round's tail
            tail_end[:, c] = torch.where(ok, e, -1)
            remaining -= torch.where(ok, e - s, 0)
        taken = tail_end > tail_start
        tail_end = torch.where(taken, tail_end, tail_start)
        # Back into the round's columns (past the last column: into padding, cut off).
        accepted = torch.nn.functional.pad(accepted, (0, TAIL_ANCHORS)).scatter_(1, columns, taken)[:, :k]
        end = torch.nn.functional.pad(end, (0, TAIL_ANCHORS)).scatter_(1, columns, tail_end)[:, :k]
        masked |= self._cover(tail_start, tail_end, None, length)
        tried = column < (t + TAIL_ANCHORS)[:, None]
        scores.scatter_(1, anchor, torch.where(tried, 2.0, best))  # each word start is tried once
        if spans is not None:
            rows, slots = accepted.nonzero(as_tuple=True)
            spans.append(torch.stack([state["rows"][rows], start[rows, slots], end[rows, slots], n[rows, slots]], 1))
        return (remaining > 0) & (scores < 2.0).any(1)

    def _first_guess(self, start, full, base, length) -> torch.Tensor:
        """`(B, K)`: which of the anchors `base` (word starts, n-grams `[start, full)`, in the round's order) the
        official loop takes when no budget runs out: an anchor is skipped when its n-gram meets one taken earlier.

        A fixed point of that rule (lower-triangular: one solution). In position order an n-gram of at most U words
        can only meet the next U - 1 anchors (each starts a word of its own), so the rule needs a `(B, K, 2(U-1))`
        band of neighbours, not all `(B, K, K)` pairs.
        """
        batch, k = start.shape
        column = torch.arange(k)
        order = torch.where(base, start, length + column).argsort(1)  # (B, K) the columns in position order
        start, full, base = start.gather(1, order), full.gather(1, order), base.gather(1, order)
        reach = torch.arange(1, self.span_upper)
        offsets = torch.cat([-reach, reach])  # (2(U-1),) neighbours before and after in position order
        neighbour = column[:, None] + offsets  # (K, 2(U-1))
        inside = (neighbour >= 0) & (neighbour < k)
        index = neighbour.clamp(0, k - 1).view(1, -1).expand(batch, -1)  # (B, K * 2(U-1))

        def of_neighbours(values):
            return values.gather(1, index).view(batch, k, -1)

        # before: the neighbour's n-gram reaches this start; after: this n-gram reaches the neighbour's start
        meets = torch.where(
            offsets < 0, of_neighbours(full) > start[..., None], full[..., None] > of_neighbours(start)
        )
        meets &= inside & of_neighbours(base) & base[..., None] & (of_neighbours(order) < order[..., None])  # earlier
        accepted = base
        for _ in range(k):
            update = base & ~(meets & of_neighbours(accepted)).any(2)
            if torch.equal(update, accepted):
                break
            accepted = update
        return torch.zeros_like(accepted).scatter_(1, order, accepted)  # back to the round's order

    @staticmethod
    def _cover(start: torch.Tensor, end: torch.Tensor, accepted: torch.Tensor | None, length: int) -> torch.Tensor:
        """`(B, L)` bool: the tokens of the non-overlapping spans `[start, end)` (`(B, K)`; empty where
        `accepted` is False): +1 at each start and -1 at each end, then a cumsum."""
        weight = torch.ones_like(start) if accepted is None else accepted.long()
        weight = weight * (end > start)
        edges = torch.zeros(start.shape[0], length + 1, dtype=torch.long)
        edges.scatter_add_(1, start, weight).scatter_add_(1, end, -weight)
        return edges[:, :length].cumsum(1) > 0
