"""Fuzz one target of `targets.py`: with atheris (coverage-guided, libFuzzer's options), or built in.

    python tools/fuzz/fuzz_one.py TARGET [CORPUS_DIR] -max_total_time=60 -timeout=5 -rss_limit_mb=1024
    python tools/fuzz/fuzz_one.py TARGET --builtin SECONDS CURRENT_FILE

Any exception other than a `CtxStoreError` is a crash: atheris reports it and exits non-zero; the
built-in fuzzer prints it as JSON and exits 1. A hang is caught by the caller (libFuzzer's `-timeout`, or
`tools/attacks/fuzz.py`'s watchdog, which reads the input being tried from CURRENT_FILE).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MEMORY_CAP = 2 << 30  # address space one fuzzing process may use (the per-input cap)


# Pieces known to trouble readers: CBOR value-sharing tags and indefinite lengths, a lone surrogate escape,
# deep nesting, huge lengths.
TOKENS = (b"\xd8\x1c", b"\xd8\x1d", b"\xd9\xd9\xf7", b"\x9f", b"\xbf", b"\xff", b"\x5b\xff\xff\xff\xff\xff\xff\xff\xff",
          b'"\\ud800"', b'"\\udfff\\ud800"', b"[" * 1500, b'{"a":' * 700, b"\x81" * 2000, b"\xff\xff\xff\x7f",
          b"1e999999", b"-0", b"NaN")


def _mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        op = rng.randrange(7)
        if op == 6:
            at = rng.randrange(len(out) + 1)
            out[at:at] = rng.choice(TOKENS)
            continue
        at = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            out[at:at] = rng.randbytes(rng.randrange(1, 8))
        elif op == 2 and out:
            del out[at:at + rng.randrange(1, 16)]
        elif op == 3 and out:
            out[min(at, len(out) - 1)] = rng.choice((0, 0xFF, 0x7F, 0x80, 0xC6, 0xD8, 0x9F, 0xBF))
        elif op == 4:
            other = rng.choice(pool)
            s = rng.randrange(len(other) + 1)
            out[at:at] = other[s:s + rng.randrange(1, 64)]
        elif out:
            s = rng.randrange(len(out))
            out[at:at] = out[s:s + rng.randrange(1, 32)] * rng.randrange(1, 4)
    return bytes(out[:1 << 16])


def builtin(name: str, seconds: float, current: Path) -> int:
    import targets

    from ctxstore import CtxStoreError

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    target = targets.TARGETS[name]
    pool = targets.seeds(name)
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    runs = refused = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and runs < 10_000_000:
        data = _mutate(rng, rng.choice(pool), pool) if runs else pool[0]
        current.write_bytes(data)
        runs += 1
        try:
            target(data)
            if len(pool) < 200 and rng.random() < 0.05:
                pool.append(data)  # inputs that were accepted make good parents
        except CtxStoreError:
            refused += 1
        except MemoryError:
            print(json.dumps({"runs": runs, "refused": refused, "crash": "MemoryError: an input needed over "
                              f"{MEMORY_CAP >> 20} MiB", "input": data.hex()[:400]}))
            return 1
        except Exception:
            print(json.dumps({"runs": runs, "refused": refused, "crash": traceback.format_exc(limit=4)[-1500:],
                              "input": data.hex()[:400]}))
            return 1
    print(json.dumps({"runs": runs, "refused": refused}))
    return 0


def with_atheris(name: str, argv: list[str]) -> None:
    import atheris

    with atheris.instrument_imports(include=["ctxstore"]):
        import targets

        from ctxstore import CtxStoreError
    target = targets.TARGETS[name]

    def one_input(data: bytes) -> None:
        with contextlib.suppress(CtxStoreError):
            target(data)

    atheris.Setup([sys.argv[0], *argv], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[2] == "--builtin":
        sys.exit(builtin(sys.argv[1], float(sys.argv[3]), Path(sys.argv[4])))
    with_atheris(sys.argv[1], sys.argv[2:])
