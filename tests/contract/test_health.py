"""Connection health policy (adb/health.py) on a clock and a random source the
test controls: backoff growth, cap, jitter bounds and reset; lifetime jitter."""

import pytest

from adb.health import Backoff, lifetime


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_backoff_doubles_to_its_cap_and_waits_that_long():
    clock = Clock()
    backoff = Backoff(initial=0.1, maximum=1.0, clock=clock, rand=lambda: 0.0)
    assert backoff.wait_left() == 0.0
    delays = [backoff.failed(f"refused {n}") for n in range(6)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert backoff.failures == 6 and backoff.last_error == "refused 5"
    assert backoff.wait_left() == pytest.approx(1.0)
    clock.now += 0.6
    assert backoff.wait_left() == pytest.approx(0.4)
    clock.now += 0.4
    assert backoff.wait_left() == 0.0


@pytest.mark.parametrize("rand, factor", [(0.0, 1.0), (0.5, 0.875), (0.999999, 0.75)])
def test_backoff_jitter_takes_off_at_most_a_quarter(rand, factor):
    backoff = Backoff(initial=2.0, maximum=10.0, clock=Clock(), rand=lambda: rand)
    assert backoff.failed("x") == pytest.approx(2.0 * factor, rel=1e-5)
    assert backoff.failed("x") == pytest.approx(4.0 * factor, rel=1e-5)


def test_a_probe_that_finds_the_server_down_restarts_the_wait():
    clock = Clock()
    backoff = Backoff(initial=0.1, clock=clock, rand=lambda: 0.0)
    backoff.failed("silent")
    clock.now += 0.2  # a probe slower than the wait ...
    assert backoff.wait_left() == 0.0
    backoff.still_down()  # ... found the server still silent: wait again, as long
    assert backoff.wait_left() == pytest.approx(0.1)
    assert backoff.failures == 1
    backoff.failed("x")
    clock.now += 0.05
    backoff.still_down()  # the wait under way restarts from now, at its own length
    assert backoff.wait_left() == pytest.approx(0.2)


def test_a_success_resets_the_backoff():
    clock = Clock()
    backoff = Backoff(initial=0.5, clock=clock, rand=lambda: 0.0)
    backoff.failed("a")
    backoff.failed("b")
    assert backoff.succeeded() == 2
    assert backoff.failures == 0 and backoff.wait_left() == 0.0
    assert backoff.failed("c") == pytest.approx(0.5)  # growth starts over


def jittered(max_lifetime: float) -> float:
    """``lifetime()`` of a set max_lifetime (so never None)."""
    value = lifetime(max_lifetime)
    assert value is not None
    return value


def test_lifetime_jitter_is_at_most_five_percent():
    assert lifetime(None) is None
    assert lifetime(100.0, rand=lambda: 0.0) == pytest.approx(100.0)
    assert lifetime(100.0, rand=lambda: 0.999999) == pytest.approx(95.0, rel=1e-5)
    spread = {round(jittered(60.0), 6) for _ in range(200)}
    assert len(spread) > 1 and all(57.0 <= t <= 60.0 for t in spread)
