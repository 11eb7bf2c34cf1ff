#!/usr/bin/env python3
"""Makes the zstd dictionary the store compresses its JSON records with (src/store/dictionary.zstd).

Usage: scripts/store-dictionary.py DB OUT.zstd DICT_ID [DICTIONARY_IN_USE]

DB is the log of a store the load bench filled (`db` in its data directory, copied while it
runs; with a store made since schema 11, also the dictionary its records were packed with,
`src/store/dictionary.zstd`). Every JSON record found in it (zstd frames, and records too small to be compressed) is
kept with its structure (keys, numbers, and single lowercase words: the names of commands, states
and enums, and such short names as a user's) while every other string is replaced: free text with
neutral words, and ids and times with random digits in their own shape. So the dictionary learns
what records look like and nothing any agent wrote. zstd's trainer then makes a 4 KiB
dictionary with DICT_ID. Needs Python's `zstandard` package and the `zstd` command.

A dictionary, once shipped, must never change: stored records name it by its id. A new one gets
a new id and is added beside the old, which stays for reading.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
WORDS = ("alpha beta gamma delta file write read search plan goal step task note code run test "
         "agent result output list folder web page text data").split()
HEX_ID = re.compile(r"^[0-9a-f]{8,64}$")
TIME = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)$")
# What a record names rather than says: commands, states, enum values.
NAME = re.compile(r"^[a-z_]{1,24}$")


def records(log: bytes, dictionary):
    """The distinct JSON records in a sled log: in zstd frames, or as they are."""
    seen = set()
    decompressor = zstandard.ZstdDecompressor(dict_data=dictionary)
    at = 0
    while (at := log.find(ZSTD_MAGIC, at) + 1) > 0:
        start = at - 1
        try:
            size = zstandard.get_frame_parameters(log[start:start + 18]).content_size
            if not 0 < size <= 1 << 20:
                continue
            raw = decompressor.decompressobj().decompress(log[start:start + 2 * size + 1024])
        except zstandard.ZstdError:
            continue
        if len(raw) == size and raw.startswith(b'{"v"') and raw not in seen:
            seen.add(raw)
            yield raw
    decoder = json.JSONDecoder()
    at = 0
    while (at := log.find(b'{"v":', at) + 1) > 0:
        text = log[at - 1:at + 4095].decode("utf-8", "ignore")
        try:
            _, end = decoder.raw_decode(text)
        except ValueError:
            continue
        raw = text[:end].encode()
        if raw not in seen:
            seen.add(raw)
            yield raw


def scrub(value, rng):
    """`value` with its free text, ids and times replaced, its structure kept."""
    if isinstance(value, dict):
        return {key: scrub(item, rng) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub(item, rng) for item in value]
    if not isinstance(value, str) or NAME.match(value):
        return value
    if HEX_ID.match(value):
        return "".join(rng.choice("0123456789abcdef") for _ in value)
    if TIME.match(value):
        return re.sub(r"\d", lambda _: rng.choice("0123456789"), value)
    words = []
    while len(" ".join(words)) < len(value):
        words.append(rng.choice(WORDS))
    return " ".join(words)[:len(value)]


def main():
    db, out, dict_id = sys.argv[1], sys.argv[2], int(sys.argv[3], 0)
    dictionary = None
    if len(sys.argv) > 4:
        with open(sys.argv[4], "rb") as dictionary_file:
            dictionary = zstandard.ZstdCompressionDict(dictionary_file.read())
    rng = random.Random(7)
    with open(db, "rb") as log_file:
        log = log_file.read()
    with tempfile.TemporaryDirectory() as samples:
        count = 0
        for raw in records(log, dictionary):
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            # Chunks of folded records are large and compress well by themselves.
            if isinstance(record.get("data"), dict) and "records" in record["data"]:
                continue
            sample = json.dumps(scrub(record, rng), separators=(",", ":"), ensure_ascii=False)
            with open(os.path.join(samples, f"{count:06d}"), "w", encoding="utf-8") as f:
                f.write(sample)
            count += 1
        print(f"{count} records")
        if count < 1000:
            sys.exit("too few records to train on: is DB a store's log, and is the dictionary its "
                     "records were packed with given?")
        subprocess.run(["zstd", "--train", "-r", samples, "--maxdict=4096", f"--dictID={dict_id}",
                        "-o", out, "-q", "-f"], check=True)


if __name__ == "__main__":
    main()
