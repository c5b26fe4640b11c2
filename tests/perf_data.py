"""A perf.data file of kernel samples, written as perf's own
tools/perf/Documentation/perf.data-file-format.txt lays it out, so that
the real ``perf script`` reads samples at addresses of a kernel other than
the running one: the file header (magic PERFILE2), one perf_file_attr (a
perf_event_attr of PERF_ATTR_SIZE_VER7, 128 bytes, and its empty ids
section), and one PERF_RECORD_SAMPLE per address; no feature sections."""

from __future__ import annotations

import struct

PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0
PERF_SAMPLE_IP, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_PERIOD = 0x1, 0x2, 0x4, 0x100
PERF_RECORD_SAMPLE = 9
ATTR_SIZE = 128      # PERF_ATTR_SIZE_VER7
HEADER_SIZE = 104    # struct perf_file_header with its 256-bit feature bitmap


def write_perf_data(path: str, samples) -> None:
    """SAMPLES: (ip, cpumode) pairs (cpumode: PERF_RECORD_MISC_KERNEL 1, _USER 2),
    one sample each, pid/tid 1, times in order."""
    # type, size, config, sample_period, sample_type, read_format, then the
    # flag bits and the fields up to sig_data, all zero
    attr = struct.pack("<IIQQQQ", PERF_TYPE_SOFTWARE, ATTR_SIZE, PERF_COUNT_SW_CPU_CLOCK, 1,
                       PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD, 0)
    attr += bytes(ATTR_SIZE - len(attr))
    file_attr = attr + struct.pack("<QQ", 0, 0)          # the ids section: none
    records = bytearray()
    for t, (ip, cpumode) in enumerate(samples):
        body = struct.pack("<QIIQQ", ip, 1, 1, 1_000_000 + t, 1)
        records += struct.pack("<IHH", PERF_RECORD_SAMPLE, cpumode, 8 + len(body)) + body
    attrs_offset = HEADER_SIZE
    data_offset = attrs_offset + len(file_attr)
    header = struct.pack("<8sQQQQQQQQ", b"PERFILE2", HEADER_SIZE, len(file_attr),
                         attrs_offset, len(file_attr), data_offset, len(records), 0, 0)
    header += bytes(HEADER_SIZE - len(header))
    with open(path, "wb") as f:
        f.write(header + file_attr + bytes(records))
