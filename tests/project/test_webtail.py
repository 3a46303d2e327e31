"""The web tail tracer (``benchmarks.webtail``): its split of each request into stages,
and its count of the later requests that passed a slow one, on requests made up here."""

from __future__ import annotations

from benchmarks.webtail import STAGES, Request, summary

MS = 1_000_000


def _in_turn(count: int) -> list[Request]:
    """Requests 1 ms apart, each 1 ms before its handler, 2 ms of query, 1 ms after."""
    return [Request(sent=i * MS, began=i * MS + MS, back=i * MS + 3 * MS,
                    answered=i * MS + 4 * MS) for i in range(count)]


def test_a_request_whose_query_waits_out_of_turn_is_passed_by_the_later_ones() -> None:
    requests = _in_turn(199)
    # sent at 50 ms, its handler began in turn, its answer came back 100 ms late
    requests[50] = Request(sent=50 * MS, began=51 * MS, back=153 * MS, answered=154 * MS)
    found = summary(requests)
    assert found["requests"] == 199
    assert found["stages"]["the query"]["max"] == 102.0
    assert found["stages"]["before the handler"]["max"] == 1.0
    # the slowest 1% is that one request
    assert found["stages"]["the query"]["slowest 1%: mean ms"] == 102.0
    # every later request sent before 150 ms got its answer first: 99 of them
    assert found["slowest 1%: later requests whose answer was back before it (median)"] == 99
    assert found["slowest 1%: later requests that began before it (median)"] == 0


def test_requests_served_in_turn_are_passed_by_none() -> None:
    found = summary(_in_turn(500))
    assert found["slowest 1%: later requests that began before it (median)"] == 0
    assert found["slowest 1%: later requests whose answer was back before it (median)"] == 0
    assert found["total"]["p99"] == 4.0
    assert set(found["stages"]) == set(STAGES)


def test_a_wait_before_the_handler_is_told_apart_from_the_query() -> None:
    requests = _in_turn(300)
    for i in (10, 20, 30):  # the server read these 40 ms late
        sent = requests[i].sent
        requests[i] = Request(sent=sent, began=sent + 41 * MS, back=sent + 43 * MS,
                              answered=sent + 44 * MS)
    found = summary(requests)
    assert found["stages"]["before the handler"]["slowest 1%: mean ms"] == 41.0
    assert found["stages"]["the query"]["slowest 1%: mean ms"] == 2.0
    # the one sent at 20 ms began at 61: passed by those sent at 21..59 but the one at 30
    assert found["slowest 1%: later requests that began before it (median)"] == 38
