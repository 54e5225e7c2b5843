"""``LineReader.push_lines``: a worker's lines handed to the hub as the bytes arrive must be the
lines ``read_bounded_line`` returned, in order: whole across chunks, an oversized one as
``OVERSIZED`` (and nothing of it), the last partial line at the end of the stream."""

from __future__ import annotations

import asyncio

import pytest

from runner.hub.line_reader import LineReader
from runner.hub.lines import OVERSIZED


def _pushing(reader: LineReader, taken: list[object], hang_up_on: bytes | None = None) -> asyncio.Future[None]:
    def take(line: object) -> bool:
        taken.append(line)
        return line != hang_up_on

    return reader.push_lines(take)


def test_buffered_and_later_lines_come_whole_and_in_order():
    async def scenario() -> list[object]:
        reader = LineReader(100, asyncio.get_running_loop())
        reader.feed_data(b"one\ntw")
        taken: list[object] = []
        done = _pushing(reader, taken)
        reader.feed_data(b"o\nthr")
        reader.feed_data(b"ee\n")
        reader.feed_eof()
        await done
        return taken

    assert asyncio.run(scenario()) == [b"one\n", b"two\n", b"three\n"]


def test_an_oversized_line_is_one_oversized_and_the_next_line_is_whole():
    async def scenario() -> list[object]:
        reader = LineReader(10, asyncio.get_running_loop())
        taken: list[object] = []
        done = _pushing(reader, taken)
        reader.feed_data(b"x" * 8)
        reader.feed_data(b"x" * 8)  # past the limit without a newline: dropped as it comes
        reader.feed_data(b"xxx\nok\n" + b"y" * 11 + b"\nlast\n")
        reader.feed_eof()
        await done
        return taken

    assert asyncio.run(scenario()) == [OVERSIZED, b"ok\n", OVERSIZED, b"last\n"]


def test_the_last_partial_line_is_taken_at_the_end_of_the_stream():
    async def scenario() -> tuple[list[object], bool]:
        reader = LineReader(100, asyncio.get_running_loop())
        taken: list[object] = []
        done = _pushing(reader, taken)
        reader.feed_data(b"whole\npart")
        reader.feed_eof()
        await done
        return taken, done.done()

    assert asyncio.run(scenario()) == ([b"whole\n", b"part"], True)


def test_hanging_up_takes_no_later_line():
    async def scenario() -> list[object]:
        reader = LineReader(100, asyncio.get_running_loop())
        taken: list[object] = []
        done = _pushing(reader, taken, hang_up_on=b"bye\n")
        reader.feed_data(b"a\nbye\nb\n")
        reader.feed_data(b"c\n")
        await done
        return taken

    assert asyncio.run(scenario()) == [b"a\n", b"bye\n"]


def test_a_lost_connection_ends_the_lines_with_its_error():
    async def scenario() -> None:
        reader = LineReader(100, asyncio.get_running_loop())
        done = _pushing(reader, [])
        reader.set_exception(ConnectionResetError("peer reset"))
        await done

    with pytest.raises(ConnectionResetError, match="peer reset"):
        asyncio.run(scenario())
