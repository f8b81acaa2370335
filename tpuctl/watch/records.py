"""TFRecord framing, read incrementally: only new bytes, CRC-checked, tolerant of a half-written end.

A record is `length (u64) | masked crc32c(length) (u32) | data | masked crc32c(data) (u32)`.
A writer appends records while we read, so the last one may be incomplete:
it stays in the buffer until its bytes arrive — never an error, never lost,
never read twice. A record whose data CRC fails is reported once and skipped;
a damaged length (its header CRC fails) makes the reader scan forward to the
next position where a header checks out.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

import google_crc32c

HEADER = struct.Struct("<QI")
LENGTH = struct.Struct("<Q")
FOOTER = struct.Struct("<I")
HEADER_SIZE = 12
FOOTER_SIZE = 4
# Records larger than this are treated as a damaged length (TensorBoard events are KBs; 1 GiB is absurd).
MAX_RECORD = 1 << 30
_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes | memoryview) -> int:
    """TFRecord's CRC: crc32c rotated right by 15 bits plus a constant, so CRCs of CRCs stay strong."""
    crc = int(google_crc32c.value(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One record as a TFRecord writer frames it (tests and benchmarks write files with this)."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


@dataclass
class Damage:
    offset: int  # byte offset in the file where the bad record (or unreadable stretch) starts
    reason: str


@dataclass
class RecordBuffer:
    """Bytes of one file from `start` on, fed as they are read; yields whole, checked records.

    `offset` is where the next unread byte of the file goes; `pending` holds an
    incomplete last record. Feeding is append-only, so each byte is read once.
    """

    offset: int = 0
    pending: bytes = b""
    damage: list[Damage] = field(default_factory=list)

    @property
    def consumed(self) -> int:
        """File offset up to which every record has been handed out (or skipped)."""
        return self.offset - len(self.pending)

    def take(self, chunk: bytes) -> tuple[bytes, int]:
        """Pending bytes plus a new chunk, and the file offset where they start; pair with `keep`."""
        base = self.consumed
        self.offset += len(chunk)
        return (self.pending + chunk if self.pending else chunk), base

    def keep(self, data: bytes, pos: int) -> None:
        """Everything before `pos` is handed out; the rest waits for more bytes."""
        self.pending = data[pos:]

    def feed(self, chunk: bytes) -> list[bytes]:
        """The complete records in pending + chunk, in order; the incomplete rest stays pending."""
        data, base = self.take(chunk)
        records: list[bytes] = []
        append = records.append
        crc32c = google_crc32c.value
        unpack_length = LENGTH.unpack_from
        unpack_crc = FOOTER.unpack_from
        pos = 0
        end = len(data)
        while pos + HEADER_SIZE <= end:
            length = unpack_length(data, pos)[0]
            stop = pos + HEADER_SIZE + length
            if stop + FOOTER_SIZE <= end:
                body = data[pos + HEADER_SIZE : stop]
                crc = crc32c(body)
                # The common case, inlined (masked_crc): the hot loop of every tail.
                if (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF == unpack_crc(data, stop)[0]:
                    append(body)
                    pos = stop + FOOTER_SIZE
                    continue
            checked, after = self.step(data, pos, base)
            if after == pos:
                break  # the last record is not all written yet
            pos = after
            if checked is not None:
                append(checked)
        self.keep(data, pos)
        return records

    def step(self, data: bytes, pos: int, base: int) -> tuple[bytes | None, int]:
        """The record at `pos` and where the next starts: (body, next), (None, next) past damage,
        or (None, pos) — no progress — when it is not all written yet. Damage is recorded once, here."""
        end = len(data)
        length = LENGTH.unpack_from(data, pos)[0]
        stop = pos + HEADER_SIZE + length
        if stop + FOOTER_SIZE <= end:
            body = data[pos + HEADER_SIZE : stop]
            if masked_crc(body) == FOOTER.unpack_from(data, stop)[0]:
                return body, stop + FOOTER_SIZE
            if self._header_ok(data, pos):
                # The length is right, the data is not: skip exactly this record.
                self.damage.append(Damage(base + pos, "record data fails its CRC; skipped"))
                return None, stop + FOOTER_SIZE
        elif length <= MAX_RECORD and self._header_ok(data, pos):
            return None, pos  # a record still being written: wait for the rest
        # The length itself is damaged: find the next header that checks out.
        resume = self._resync(data, pos + 1, end)
        self.damage.append(Damage(base + pos, f"damaged record header; skipped {resume - pos} bytes"))
        return None, resume

    @staticmethod
    def _header_ok(data: bytes, pos: int) -> bool:
        crc: int = HEADER.unpack_from(data, pos)[1]
        return masked_crc(data[pos : pos + 8]) == crc

    @staticmethod
    def _resync(data: bytes, start: int, end: int) -> int:
        """The next offset whose 12 bytes are a valid header, or where too few bytes remain to tell.

        Not byte by byte (8 s for 5 MB): a valid header's length is at most MAX_RECORD,
        so its upper four bytes are zero, and only offsets four bytes before four zero
        bytes can start one. bytes.find jumps between those candidates in C (random
        damage has almost none), and each is CRC-checked exactly as before. A stretch
        of 12+ zero bytes (a zeroed or preallocated block) is never a header, its CRC
        would have to be 0, so a run of zeros is stepped over in one regex search.
        Garbage dense with small integers makes a candidate every few bytes; those
        repeat, so each distinct 12-byte window is checked once."""
        last = end - HEADER_SIZE  # the last offset with a whole header after it
        pos = start
        crc32c = google_crc32c.value
        find = data.find
        checked: dict[bytes, bool] = {}
        budget = _DENSE  # candidates checked one by one before switching to the bulk filter
        while pos <= last:
            if budget <= 0:
                found = _bulk_resync(data, pos, last)
                return found if found >= 0 else last + 1
            candidate = find(_ZERO4, pos + 4, end - 4) - 4
            if candidate < 0:
                break
            window = data[candidate : candidate + HEADER_SIZE]
            valid = checked.get(window)
            if valid is None:
                length, crc = HEADER.unpack(window)
                if not length and not crc:  # 12 zero bytes: skip the whole run of zeros
                    nonzero = _NONZERO.search(data, candidate, end)
                    pos = max(candidate + 1, (nonzero.start() if nonzero else end) - HEADER_SIZE + 1)
                    continue
                value = crc32c(window[:8])
                checked[window] = valid = length <= MAX_RECORD and (((value >> 15) | (value << 17)) + _MASK_DELTA) & 0xFFFFFFFF == crc
            if valid:
                return candidate
            budget -= 1
            pos = candidate + 1
        return max(pos, last + 1)


def _header_valid(data: bytes, pos: int) -> bool:
    length, crc = HEADER.unpack_from(data, pos)
    return bool(length <= MAX_RECORD and masked_crc(data[pos : pos + 8]) == crc)


def _byte_tables() -> tuple[int, list[list[bytes]], list[tuple[bytes, bytes, bytes, bytes]]]:
    """Tables for `_bulk_resync`, from the CRC's linearity: for a length whose upper four bytes are
    zero, rotr15(crc32c(length)) is a constant XOR one table entry per low length byte, so each of
    its bytes is four `bytes.translate`s XORed. The stored field minus the mask constant is undone
    byte by byte with borrows, each borrow a 0x00/0xFF byte from a translate."""

    def rotr15(crc: int) -> int:
        return ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF

    zero = int(google_crc32c.value(bytes(8)))
    const = rotr15(zero)
    crc_tables: list[list[bytes]] = []  # [j][k]: byte k of rotr15(crc) contributed by length byte j
    for j in range(4):
        contributions = []
        for v in range(256):
            length = bytearray(8)
            length[j] = v
            contributions.append(rotr15(int(google_crc32c.value(bytes(length))) ^ zero))
        crc_tables.append([bytes((c >> (8 * k)) & 0xFF for c in contributions) for k in range(4)])
    field_tables = []  # [k]: field byte minus mask byte, minus one more, borrow out without / with borrow in
    for k in range(4):
        d = (_MASK_DELTA >> (8 * k)) & 0xFF
        field_tables.append(
            (
                bytes((v - d) & 0xFF for v in range(256)),
                bytes((v - d - 1) & 0xFF for v in range(256)),
                bytes(0xFF if v < d else 0 for v in range(256)),
                bytes(0xFF if v <= d else 0 for v in range(256)),
            )
        )
    return const, crc_tables, field_tables


_CONST, _CRC_TABLES, _FIELD_TABLES = _byte_tables()
_DENSE = 64  # candidates in one search before the dense-garbage path takes over
_BLOCK = 1 << 18  # offsets filtered per bulk step


def _bulk_resync(data: bytes, start: int, last: int) -> int:
    """The first offset in [start, last] with a valid header, or -1: every offset tested at once.

    For a block of offsets, each header condition is computed for all of them as one big integer
    with a byte per offset (bytes.translate and integer XOR/AND/OR run in C): the four zero upper
    length bytes, and the stored CRC field equal to the masked CRC of the low four length bytes.
    An offset passes only if its byte of the OR of all differences is zero, which is exactly a
    valid header of length < 4 GiB; each one found is checked again the plain way (MAX_RECORD)."""
    pos = start
    while pos <= last:
        n = min(_BLOCK, last + 1 - pos)

        def stream(off: int, table: bytes | None = None, at: int = pos, n: int = n) -> int:
            part = data[at + off : at + off + n]
            return int.from_bytes(part.translate(table) if table is not None else part, "little")

        ones = int.from_bytes(b"\xff" * n, "little")
        diff = stream(4) | stream(5) | stream(6) | stream(7)
        borrow = 0  # 0x00/0xFF per offset: a borrow into field byte k
        for k in range(4):
            expect = int.from_bytes(bytes([(_CONST >> (8 * k)) & 0xFF]) * n, "little")
            for j in range(4):
                expect ^= stream(j, _CRC_TABLES[j][k])
            minus, minus_one, lt, le = _FIELD_TABLES[k]
            plain = stream(8 + k, minus)
            got = plain ^ ((plain ^ stream(8 + k, minus_one)) & borrow)
            diff |= got ^ expect
            if k < 3:
                out = stream(8 + k, lt)
                borrow = (out ^ ((out ^ stream(8 + k, le)) & borrow)) & ones
        flags = diff.to_bytes(n, "little")
        at = flags.find(0)
        while at >= 0:
            if _header_valid(data, pos + at):
                return pos + at
            at = flags.find(0, at + 1)
        pos += n
    return -1


_ZERO4 = bytes(4)
_NONZERO = re.compile(rb"[^\x00]")
assert masked_crc(bytes(8)) != 0  # why a run of 12 zero bytes can never be a header
