"""The web tail tracer (``benchmarks.webtail``): its split of each request into stages,
and its count of the later requests that passed a slow one, on requests made up here."""

from __future__ import annotations

import struct

import pytest

from benchmarks.webtail import STAGES, Request, kernel_times, summary

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


def _pcap(packets: list[tuple[int, int, int, bytes]]) -> bytes:
    """A nanosecond pcap of loopback (Ethernet link) holding ``(ns, source port,
    destination port, payload)`` TCP packets."""
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)]
    for stamp, source, destination, payload in packets:
        tcp = struct.pack(">HHIIBBHHH", source, destination, 0, 0, 5 << 4, 0x18, 65535, 0, 0)
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0, 64, 6,
                         0, bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))
        frame = bytes(12) + b"\x08\x00" + ip + tcp + payload
        out.append(struct.pack("<IIII", stamp // 1_000_000_000, stamp % 1_000_000_000,
                               len(frame), len(frame)) + frame)
    return b"".join(out)


def test_a_capture_of_loopback_gives_each_named_request_its_kernel_times() -> None:
    port, s = 8000, 1_000_000_000
    capture = _pcap([
        (10 * s, 40001, port, b"GET /db?seq=7 HTTP/1.1\r\nHost: x\r\n\r\n"),
        (10 * s + 5, 40002, port, b"GET /db?seq=9 HTTP/1.1\r\nHost: x\r\n\r\n"),
        (10 * s + 6, port, 40001, b""),  # an acknowledgement: no payload, not an answer
        (10 * s + 40, port, 40002, b"HTTP/1.1 200 OK\r\n\r\n{}"),
        (10 * s + 70, port, 40001, b"HTTP/1.1 200 OK\r\n\r\n{}"),
        (10 * s + 80, 40001, port, b"GET /db?seq=8 HTTP/1.1\r\nHost: x\r\n\r\n"),
        (10 * s + 95, port, 40001, b"HTTP/1.1 200 OK\r\n\r\n{}"),
        (10 * s + 99, 40002, port, b"GET /db?seq=10 HTTP/1.1\r\nHost: x\r\n\r\n"),  # unanswered
    ])
    found = kernel_times(capture, port, offset=10 * s)
    assert found == {7: (0, 70, 40001, 0), 9: (5, 40, 40002, 0), 8: (80, 95, 40001, 1)}


def test_a_capture_not_of_pcap_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="not a little-endian pcap"):
        kernel_times(b"\x00" * 64, 8000, 0)
