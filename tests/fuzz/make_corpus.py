#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/): one valid example
of every store message (docs/store-protocol.md), and request sequences for the server. Run it
again after a protocol change; the files are checked in."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def u8(v): return struct.pack('<B', v)
def u32(v): return struct.pack('<I', v)
def i64(v): return struct.pack('<q', v)
def s(b): return u32(len(b)) + b
def keys(*ks): return u32(len(ks)) + b''.join(s(k) for k in ks)


PAYLOADS = {
    'hello': u8(1) + i64(3) + s(b'n' * 32),
    'set': u8(2) + s(b'k') + s(b'value'),
    'get': u8(3) + s(b'k') + i64(50),
    'wait': u8(4) + keys(b'a', b'b') + i64(20),
    'check': u8(5) + keys(b'k'),
    'add': u8(6) + s(b'n') + i64(-3),
    'compare_set': u8(7) + s(b'k') + u8(0) + s(b'value') + s(b'other'),
    'delete': u8(8) + s(b'k'),
    'member_join': u8(9) + s(b'fuzz') + i64(4) + i64(1) + i64(60000),
    'heartbeat': u8(10),
    'broken': u8(11) + u8(4) + s(b'why'),
    'auth': u8(12) + s(b'p' * 32),
    'formed': u8(13),
    'member_client': u8(14) + s(b'fuzz') + i64(4) + i64(2),
    'ok': u8(64),
    'value': u8(65) + s(b'v'),
    'bool': u8(66) + u8(1),
    'int': u8(67) + i64(7),
    'timeout': u8(68) + s(b'late'),
    'error': u8(69) + u8(10) + s(b'no'),
    'join_ok': u8(70) + i64(100) + i64(1000),
    'ping': u8(71),
    'notice': u8(72) + i64(2) + u8(2) + s(b'quiet'),
    'challenge': u8(73) + s(b'n' * 32) + s(b'q' * 32),
}


def frame(p): return u32(len(p)) + p


def write(target, name, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


for name, p in PAYLOADS.items():
    write('fuzz_wire', name, p)
write('fuzz_wire', 'stream', b''.join(frame(PAYLOADS[n]) for n in ('set', 'get', 'ping')))

P = dict(PAYLOADS, get_big=u8(3) + s(b'fuzz/big') + i64(0))
SEQUENCES = {
    # flag byte: bit 0 the token server, bit 1 a real greeting first
    'kv_open': (0, ['hello', 'set', 'get', 'wait', 'check', 'add', 'compare_set', 'delete']),
    'kv_greeted': (2, ['set', 'get', 'add', 'delete']),
    'kv_token_greeted': (3, ['set', 'get', 'check', 'compare_set']),
    'member_open': (0, ['hello', 'member_join', 'heartbeat', 'broken']),
    'member_token_greeted': (3, ['member_join', 'heartbeat', 'heartbeat', 'broken']),
    'auth_wrong': (1, ['hello', 'auth']),
    'auth_early': (1, ['auth']),
    'before_hello': (0, ['set']),
    'reply_types': (2, ['ok', 'ping', 'notice']),
    'member_formed': (0, ['hello', 'member_join', 'formed', 'broken']),
    'member_client': (0, ['hello', 'member_client', 'set', 'get']),
    # bit 2: a client that never reads its replies, asking for the 60 KiB value again and again
    'unread_gets': (4, ['hello'] + ['get_big'] * 40),
    'unread_gets_greeted': (6, ['get_big'] * 40),
}
for name, (flag, seq) in SEQUENCES.items():
    write('fuzz_store_server', name, u8(flag) + b''.join(frame(P[n]) for n in seq))
write('fuzz_store_server', 'oversized', u8(2) + u32(1 << 24) + b'x' * 64)
