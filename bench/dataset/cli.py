"""``python -m bench data``: the seeds' corpora and other text into Megatron's .bin/.idx with GPT-2's BPE."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from bench.config.extras import require
from bench.config.text import error_text

# Documents needed for every part of the kit's --split 949,50,1 to hold one.
SPLIT_DOCUMENTS = 1000


class Terminated(Exception):
    """``bench data`` got SIGTERM (``kill``, a batch system's time limit)."""


def _raise_terminated(signum: int, frame: object) -> None:
    """SIGTERM as an exception, so the partial files are removed on the way out as on any error;
    the signal's default action would leave them."""
    raise Terminated


def cmd_data(args: argparse.Namespace) -> int:
    # Imported here: numpy and the tokenizers are needed by this command only (the data extra).
    for module in ("numpy", "tiktoken"):
        require(module, "data", "python -m bench data")
    from bench.dataset.gpt2 import FastPathMismatch, TokenizerFilesError
    from bench.dataset.prepare import InputError, check_name, named, prepare, tokenizer_beside

    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        if args.name is not None:
            check_name(args.name)
        result = prepare([Path(p) for p in args.inputs], Path(args.vocab_file),
                         Path(args.merge_file), Path(args.out_dir), json_key=args.json_key,
                         exact=args.exact)
    except (InputError, TokenizerFilesError, FastPathMismatch) as error:
        print(f"error: {error_text(error)}", file=sys.stderr)
        return 1
    except OSError as error:  # a read-only or full disk: the partial files are removed already
        print(f"error: the dataset could not be written to {args.out_dir} ("
              f"{error_text(error.strerror or error)}); nothing was left there: free some space, "
              "or give --out-dir a folder you can write to", file=sys.stderr)
        return 1
    except Terminated:
        print(f"error: stopped by SIGTERM; nothing was left in {args.out_dir}", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
    if result.reused:
        print(f"already prepared from the same inputs: {result.prefix} ({result.documents:,} "
              f"documents, {result.tokens:,} tokens)")
    else:
        print(f"prepared {result.prefix} ({result.documents:,} documents, {result.tokens:,} "
              f"tokens, {result.empty_skipped:,} empty documents skipped) from "
              f"{result.text_bytes / 1e6:,.1f} MB of text in {result.seconds:.1f} s "
              f"({result.mb_per_s:,.1f} MB/s; {result.mb_per_cpu_s:,.1f} MB per CPU-second; "
              f"{result.tokenizer})")
    prefix, vocab, merges = result.prefix, Path(args.vocab_file), Path(args.merge_file)
    if args.name is not None:
        try:
            prefix = named(result.prefix, args.name)
            vocab, merges = tokenizer_beside(prefix.parent, vocab, merges)
        except InputError as error:
            print(f"error: {error_text(error)}", file=sys.stderr)
            return 1
    print(f"use: --data-path {prefix} --vocab-file {vocab} --merge-file {merges}")
    if result.documents < SPLIT_DOCUMENTS:
        print(f"note: {result.documents} documents: the engines' split 949,50,1 leaves the "
              f"validation or test part without a document below {SPLIT_DOCUMENTS}, and "
              "megatron-core 0.19 was seen to hang building such a split; add text",
              file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser(
        "data", help="tokenize text (jsonl, .txt, compressed, wikiextractor output) into "
        "Megatron's .bin/.idx with GPT-2's BPE")
    data.add_argument("inputs", nargs="+", help=".jsonl/.json (a document per line), .txt (a "
                      "document per file), either compressed as .zst (SlimPajama), .xz (OSCAR), "
                      ".gz or .bz2 (compressed .txt: a blank line between documents), "
                      "wikiextractor output (AA/wiki_00, plain or --json), or folders of them")
    data.add_argument("--vocab-file", required=True, help="GPT-2 vocab.json (encoder.json)")
    data.add_argument("--merge-file", required=True, help="GPT-2 merges.txt (vocab.bpe)")
    data.add_argument("--out-dir", default="data", help="where the .bin/.idx go (default data/)")
    data.add_argument("--json-key", default="text", help="the text's key in each JSON line "
                      "(default text)")
    data.add_argument("--name", help="also name the data NAME: OUT_DIR/NAME_text_document (links to "
                      "the files), a --data-path that stays when the inputs change, e.g. a "
                      "platform file's default (meg-gpt2, slimpajama); the vocab and merges are "
                      "copied beside it as gpt2-vocab.json and gpt2-merges.txt")
    data.add_argument("--exact", action="store_true", help="tiktoken only (no tokie fast path)")
    data.set_defaults(func=cmd_data)
