"""``palacectl search``'s lines against a fake client (issue 47 §1.6): a drawer not embedded yet
showed ``score 0.000``; its hit now says the score is pending."""

from __future__ import annotations

from tests.ctl.fake_client import FakeClient, invoke


def hit(drawer_id: str, score: float, embedded: bool | None) -> dict[str, object]:
    found = {"drawer_id": drawer_id, "wing": "w", "room": "r", "filed_at": "2026-01-01T00:00:00.000000Z",
             "content": f"content of {drawer_id}\n", "added_by": "a", "score": score}
    return found if embedded is None else {**found, "embedded": embedded}


def test_a_hit_not_embedded_yet_says_its_score_is_pending(fake: FakeClient):
    fake.answers["search"] = {"query": "router", "mode": "hybrid", "count": 3, "pending_embeddings": 1,
                              "results": [hit("drw_1", 0.61234, True), hit("drw_2", 0.0, False),
                                          hit("drw_3", 1.5, None)]}
    result = invoke("search", "router")
    assert result.returncode == 0, result
    heads = [line for line in result.stdout.splitlines() if line.startswith("drw_")]
    assert heads == ["drw_1  w/r  2026-01-01  score 0.612", "drw_2  w/r  2026-01-01  score pending (not embedded yet)",
                     "drw_3  w/r  2026-01-01  score 1.500"]  # keyword mode says nothing of embedding
