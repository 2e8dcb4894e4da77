"""
Prepare a dataset for train.py, nanoGPT style: whole articles of text, a random share of them
(--seed) for val, each encoded and followed by the end-of-text token, into data/<name>/train.bin and
val.bin (np.uint16 token ids) and meta.json (what they hold). The tokenizers are in text.py.

    python prepare_wikipedia.py              # what train.py trains on by default: data/wikitext103/
    python prepare_wikipedia.py --wikitext103 --input PATH/  # the same, offline: your copies
    python prepare_wikipedia.py --wikitext2 --tokenizer=byte  # -> data/wikitext2_valid_byte/
    python prepare_wikipedia.py --input my_texts/ --name=mine  # .txt files, folders, .jsonl
"""
import hashlib
import json
import math
import os
import re
import signal
import sys
from contextlib import suppress

import numpy as np
import requests
from requests.adapters import HTTPAdapter
from urllib3.util import Retry

from configurator import add_flag, argument_parser
from data import is_task
from machinery.files import claim_folder, hold_folder, release_folder, write_atomic
from machinery.process import STOPS, fail, on_ctrl_c
from text import get_tokenizer, read_articles, split_wikitext, without_nul

TRAIN_DEFAULT = "wikitext103"  # train.py's default --dataset, what no flags prepare
WRITE_UP_TOKENS = {"train": 38_276_830, "val": 4_341_780}  # the write-up's train.bin and val.bin
DATASET_FILES = ("train.bin", "val.bin", "meta.json")  # in the order written, and renamed
# what a stop leaves: the line it ends with
stopped = "a dataset there stays whole, a download resumes: run the same command again"

# -----------------------------------------------------------------------------
# the core: articles -> a train/val split -> token ids -> train.bin, val.bin, meta.json
def prepare(articles, out, args, source):
    """Writes the dataset of `articles` ({"title", "text"}, "val" if marked, "ids") into out."""
    encode, _, vocab_size, eot_token = get_tokenizer(args.tokenizer)
    marked = any("val" in a for a in articles)  # else a random share of them goes to val
    articles = without_nul(articles)
    num_found = len(articles)
    articles = [a for a in articles if len(a["text"]) >= args.min_chars]
    if not articles:
        fail(f"no article of at least --min_chars={args.min_chars} characters in {source} "
             f"({num_found} found); give more text or lower --min_chars")
    # split by whole articles, so that no article has text in both train and val
    is_val = np.array([a.get("val", False) for a in articles])
    if not marked:  # val_fraction of them, at least one
        num_val = max(1, round(len(articles) * args.val_fraction)) if args.val_fraction > 0 else 0
        is_val[np.random.default_rng(args.seed).permutation(len(articles))[:num_val]] = True
    if is_val.all() or (marked and not is_val.any()):
        fail(f"{len(articles)} article(s) of at least --min_chars={args.min_chars} characters "
             f"leave no {'train' if is_val.all() else 'val'} article; give more text or lower "
             f"--min_chars or --val_fraction")
    splits = {"train": [], "val": []}
    for i, article in enumerate(articles):  # its token ids, then the end-of-text token
        ids = article.get("ids")  # WikiText-103's come tokenized
        if ids is None:
            ids = np.array(encode(article["text"]) + [eot_token], dtype=np.uint16)
            if (i + 1) % 100 == 0 or i + 1 == len(articles):
                print(f"\rtokenized {i + 1}/{len(articles)} articles", end="", flush=True)
        splits["val" if is_val[i] else "train"].append(ids)
    print()
    meta = {"tokenizer": args.tokenizer, "vocab_size": vocab_size, "eot_token": eot_token,
            "dtype": "uint16"}
    if args.compact_vocab:  # the ids that occur (and end-of-text) renumbered densely, in order
        compact_vocab = np.unique(np.concatenate([*splits["train"], *splits["val"], [eot_token]]))
        dense = np.zeros(vocab_size, dtype=np.uint16)
        dense[compact_vocab] = np.arange(len(compact_vocab))
        splits = {split: [dense[ids] for ids in arrays] for split, arrays in splits.items()}
        meta.update(vocab_size=len(compact_vocab), eot_token=int(dense[eot_token]),
                    full_vocab_size=vocab_size, compact_vocab=compact_vocab.tolist())
    files = {}
    for split, arrays in splits.items():
        ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.uint16)
        files[f"{split}.bin"] = ids.tobytes()
        meta[f"{split}_tokens"], meta[f"{split}_articles"] = len(ids), len(arrays)
        meta[f"{split}_token_sum"] = int(ids.sum(dtype=np.uint64))  # tells preparations apart
        meta[f"{split}_sha256"] = hashlib.sha256(files[f"{split}.bin"]).hexdigest()  # and damage
    meta.update(source=source, min_chars=args.min_chars,
                skipped_short_articles=num_found - len(articles),
                val_fraction=None if marked else args.val_fraction, seed=args.seed)
    files["meta.json"] = (json.dumps(meta, indent=2) + "\n").encode("utf-8")
    write_dataset(out, files)
    return meta


def write_dataset(out, files):
    """All or nothing: the new files written whole beside the old ones as <name>.new, then renamed
    over them with stop signals held off till all three are in place (finish_writing)."""
    kept = os.path.exists(os.path.join(out, "meta.json")) * f"; {out} keeps its old dataset"
    try:
        for name in DATASET_FILES:  # meta.json.new last: its presence says all three are whole
            write_atomic(os.path.join(out, name + ".new"), files[name], kept)
    except BaseException:  # a full disk, Ctrl-C: the new files go, the old dataset stays
        for name in DATASET_FILES:
            with suppress(OSError):
                os.remove(os.path.join(out, name + ".new"))
        raise
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS) if hasattr(signal, "pthread_sigmask") \
        else None
    finish_writing(out)
    global stopped  # a stop held off till now says so
    stopped = f"the new dataset in {out} is whole and in place"
    if held is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def finish_writing(out):
    """Rename <name>.new over <name> where meta.json.new says the three are whole (a kill -9 may
    have stopped an earlier preparation while it renamed them), else remove them."""
    whole = os.path.exists(os.path.join(out, "meta.json.new"))
    for name in DATASET_FILES:
        new = os.path.join(out, name + ".new")
        if whole and os.path.exists(new):
            os.replace(new, os.path.join(out, name))
        elif os.path.exists(new):
            os.remove(new)

# -----------------------------------------------------------------------------
# where the articles come from (local files, WikiText-2, WikiText-103), and the command line
def read_input(paths):
    """The articles of local .txt files (split at WikiText titles), folders of them, or .jsonl."""
    articles = []
    for path in paths:
        if not os.access(path, os.R_OK | os.X_OK * os.path.isdir(path)):  # a broken link too
            fail(f"--input path not found, or not readable: {path}")
        files = [path]
        if os.path.isdir(path):  # its .txt files, less folders and broken links of such names
            files = [os.path.join(path, f) for f in sorted(os.listdir(path))
                     if f.lower().endswith(".txt") and os.path.isfile(os.path.join(path, f))]
            if not files:
                fail(f"no .txt files in folder {path}; give .txt files, or .jsonl of articles")
        for file in files:
            articles += read_articles(file)
    return articles


# WikiText-2 as pytorch/examples ships it: split -> file, checksum kind, checksum (train.txt is
# known only by its git blob id, the sha1 of b"blob <size>\0" + content)
WIKITEXT2_URL = ("https://raw.githubusercontent.com/pytorch/examples/main/"
                 "word_language_model/data/wikitext-2/")
WIKITEXT2_FILES = {
    "train": ("train.txt", "git-blob", "2d84b35af79e411d73ea7cae83c73964c6ac83b4"),
    "valid": ("valid.txt", "sha256",
              "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"),
    "test": ("test.txt", "sha256",
             "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0"),
}
# WikiText-103 (raw) as the Hugging Face hub serves it (dataset Salesforce/wikitext, config
# wikitext-103-raw-v1) at a pinned revision: its train split's two Parquet files, 157 MB each
WIKITEXT103_URL = ("https://huggingface.co/datasets/Salesforce/wikitext/resolve/"
                   "b08601e04326c79dfdd32d625aee71d232d685c3/wikitext-103-raw-v1/")
WIKITEXT103_FILES = {
    "train-00000-of-00002.parquet":
        "74da360f23826045b3e6ac6375411fdb15f003030aa74f2596ed08b857cb9212",
    "train-00001-of-00002.parquet":
        "ba090ac30dbf5461e8dcbdd1a1b8e6f3cf9c2c756d64f0c1220450acd514f720",
}
# a failed request (no connection, HTTP 429, 5xx) is tried again after 0, 2, 4, 8, 16 s, or what
# the server's Retry-After asks; a host that cannot be reached at all, twice
RETRY = Retry(total=5, connect=2, backoff_factor=1, status_forcelist=(429, 500, 502, 503, 504))
CHUNK = 1 << 20  # bytes written at a time: a cut download goes on after its last whole chunk


def file_checksum(path, kind):
    """The hex digest of the file at path: its sha256, or (kind git-blob) its git blob id."""
    h = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def checked_file(args, what, name, kind, checksum, url, url_flag):
    """<out_dir>/<what>/name, downloaded where absent, or your copy in --input's folder; checked."""
    folder = os.path.join(args.out_dir, what.lower())
    if args.input:
        folder = args.input[0] if os.path.isdir(args.input[0]) else os.path.dirname(args.input[0])
    path = os.path.join(folder, name)
    if not os.path.exists(path) and args.input:
        fail(f"--input gives no copy of {what}'s {name}: give a folder holding it under that name")
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        hold_folder(folder, "--out_dir", f"prepare_wikipedia.py: {name}")  # one download at a time
    if not os.path.exists(path):  # another process may have got it meanwhile
        download(url.rstrip("/") + "/" + name, path, kind, checksum, url_flag,
                 f"Offline, copy {what}'s {name} from a machine with network into {folder}/, "
                 f"then run the same command again")
    elif file_checksum(path, kind) != checksum:  # never deleted: it may be your own text
        fail(f"{path} is not {what}'s {name} as published (its {kind} differs: another revision, "
             f"an edited copy, Windows line endings?); move it away, or prepare it as your own "
             f"text: --input {path} --name=NAME")
    return path


def download(url, path, kind, checksum, url_flag, offline):
    """url into path via path.part, resumed where cut; path appears once its checksum matches."""
    part = path + ".part"
    session = requests.Session()
    for scheme in ("http://", "https://"):
        session.mount(scheme, HTTPAdapter(max_retries=RETRY))
    while True:
        have = os.path.getsize(part) if os.path.exists(part) else 0
        # identity: the file's own bytes, for byte ranges; timeout: seconds to connect, per read
        headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={have}-"} if have else {})}
        try:
            with session.get(url, headers=headers, stream=True, timeout=(10, 60)) as r:
                if r.status_code == 416:  # no byte after `have`: the part is whole
                    break
                r.raise_for_status()
                resumed = r.status_code == 206  # else the server sends it all again
                print(f"downloading {url}" + f" from byte {have:,}" * resumed, flush=True)
                with open(part, "ab" if resumed else "wb") as f:
                    for chunk in r.iter_content(CHUNK):
                        f.write(chunk)
                        print(f"\r  {f.tell() / 1e6:,.1f} MB", end="")
            print()
            break
        except requests.HTTPError as e:
            fail(f"{url} answered HTTP {e.response.status_code}; check {url_flag}")
        except requests.RequestException as e:
            print()
            if os.path.exists(part) and os.path.getsize(part) > have:
                continue  # cut after some progress: go on from there
            cause = getattr(e.args[0], "reason", None) if e.args else None  # urllib3's, at last
            reason = str(cause).split(": ", 1)[-1] if cause else type(e).__name__
            fail(f"could not download {url} ({reason}); no network? {offline}")
    if file_checksum(part, kind) != checksum:
        os.remove(part)
        fail(f"{os.path.basename(path)} from {url} does not have the expected {kind} {checksum}; "
             f"the download is deleted: run again, or check {url_flag}")
    os.replace(part, path)


def wikitext2_files(args, split):
    """The checked files of a WikiText-2 split (valid, train, test, all; None: none), as --input."""
    splits = WIKITEXT2_FILES if split == "all" else [split] if split else []
    return [checked_file(args, "WikiText-2", *WIKITEXT2_FILES[s], args.wikitext2_url,
                         "--wikitext2_url") for s in splits]


def wikitext103_articles(paths, tokens, seed, min_chars, encode, eot_token):
    """Whole articles in a random order (seed), with their "ids": val, then train, to tokens."""
    try:  # only here: the one reader of Parquet files (requirements.txt)
        import pyarrow.parquet as pq
    except ImportError:
        fail("WikiText-103's files are Parquet, which needs pyarrow: pip install pyarrow")
    # a row is a line of the split's text, with its newline: joined, they are the text file
    text = "".join(line for path in paths
                   for line in pq.read_table(path, columns=["text"])["text"].to_pylist())
    articles = [a for a in split_wikitext(text, "WikiText-103") if len(a["text"]) >= min_chars]
    counts, chosen = {"val": 0, "train": 0}, []
    for i in np.random.default_rng(seed).permutation(len(articles)):
        split = "val" if counts["val"] < tokens["val"] else "train"
        if counts["train"] >= tokens["train"]:
            break
        ids = np.array(encode(articles[i]["text"]) + [eot_token], dtype=np.uint16)
        chosen.append(dict(articles[i], ids=ids, val=split == "val"))
        counts[split] += len(ids)
        if len(chosen) % 500 == 0 or counts["train"] >= tokens["train"]:
            print(f"\rtokenized {len(chosen):,} articles: {counts}", end="", flush=True)
    if counts["train"] < tokens["train"]:
        fail(f"WikiText-103's train split has {sum(counts.values()):,} tokens in articles of at "
             f"least --min_chars={min_chars} characters; lower --train_tokens or --val_tokens")
    return chosen


def parse_args(argv):
    """The command line's flags, checked against each other."""
    parser = argument_parser(__doc__, "python prepare_wikipedia.py")
    add = parser.add_argument
    add_flag(parser, "--wikitext103", "WikiText-103's train split, as no flag gives it")
    add("--train_tokens", type=int, default=WRITE_UP_TOKENS["train"], help="WikiText-103's train")
    add("--val_tokens", type=int, default=WRITE_UP_TOKENS["val"], help="WikiText-103's val")
    add("--wikitext103_url", default=WIKITEXT103_URL, help="where its files are")
    add("--wikitext2", nargs="?", const="valid", choices=[*WIKITEXT2_FILES, "all"],
        help="WikiText-2's valid (default), train or test text, or all three")
    add("--wikitext2_val", choices=list(WIKITEXT2_FILES), help="with --wikitext2: val.bin's split")
    add("--wikitext2_url", default=WIKITEXT2_URL, help="where its files are")
    add("--input", nargs="+", metavar="PATH", help=".txt files, folders of them, .jsonl of "
        "articles; with --wikitext2 or --wikitext103: the folder of your copies of their files")
    add("--val_input", nargs="+", metavar="PATH", help="local text for val.bin alone")
    add("--tokenizer", default="gpt2", help="gpt2 (GPT-2 BPE) or byte (UTF-8)")
    add_flag(parser, "--compact_vocab", "number the GPT-2 tokens that occur densely")
    add("--val_fraction", type=float, default=0.05, help="fraction of articles for val.bin")
    add("--min_chars", type=int, default=500, help="skip articles shorter than this")
    add("--seed", type=int, default=1337, help="seed of the train/val split")
    add("--out_dir", default="data", help="the folder of datasets and downloads")
    add("--name", help="dataset folder name (default: what it holds, or the --input file's)")
    args = parser.parse_args(argv)
    if (args.wikitext2_val and not args.wikitext2) or (args.val_input and (
            args.wikitext2_val or not (args.input or args.wikitext2))):
        fail("--wikitext2_val or --val_input (one) gives the val text of a --wikitext2 or --input "
             "dataset; add --wikitext2=valid or --input PATH")
    if args.wikitext103 and (args.wikitext2 or args.val_input):
        fail("--wikitext103 is a dataset of its own; leave out --wikitext2 and --val_input")
    args.wikitext103 = args.wikitext103 or not (args.input or args.wikitext2)
    args.sized = {"train": args.train_tokens, "val": args.val_tokens} != WRITE_UP_TOKENS
    if args.sized and not args.wikitext103:
        fail("--train_tokens and --val_tokens size a WikiText-103 dataset; leave out --input "
             "and --wikitext2, or add --wikitext103 (and --input gives its files)")
    for flag, low, end in [("seed", 0, 2 ** 63), ("val_fraction", 0, 1),
                           ("train_tokens", 1, math.inf), ("val_tokens", 1, math.inf)]:
        if not low <= getattr(args, flag) < end:
            fail(f"--{flag}={getattr(args, flag)} is out of range; use a value in [{low}, {end})")
    if args.compact_vocab and args.tokenizer != "gpt2":
        fail("--compact_vocab renumbers GPT-2 token ids; use it with --tokenizer gpt2")
    return args


def dataset_name(args):
    """The dataset's folder name: --name, or one saying what it holds; stops on a bad name."""
    name, compact = args.name, "c" * args.compact_vocab
    if not name and args.wikitext2:
        val = f"-{args.wikitext2_val}" * bool(args.wikitext2_val)
        name = f"wikitext2_{args.wikitext2}{val}_{args.tokenizer}{compact}"
    elif not name and args.wikitext103:
        sizes = f"_{args.train_tokens}-{args.val_tokens}" * args.sized
        name = f"wikitext103{sizes}{'_byte' * (args.tokenizer == 'byte')}{compact}"
    elif not name:
        name = os.path.splitext(os.path.basename(os.path.normpath(args.input[0])))[0]
    if not re.fullmatch(r"[\w.-]+", name) or name in (".", ".."):
        fail(f"--name={name} is not a folder name; use letters, digits, '_', '-' and '.', "
             f"e.g. --name=mytext")
    if is_task(name.lower()):
        fail(f"--name={name} is reserved: --dataset={name.lower()} is the task of tasks/"
             f"{name.lower()}.py, not data/{name}; choose another --name, e.g. --name={name}_text")
    return name


def main(argv=None):
    args = parse_args(argv)
    encode, _, _, eot_token = get_tokenizer(args.tokenizer)  # fail fast on a bad name
    name = dataset_name(args)
    out = os.path.join(args.out_dir, name)
    claim_folder(out, " ".join(["prepare_wikipedia.py", *(sys.argv[1:] if argv is None else argv)]),
                 what="--name")  # not while a run trains on it, nor another prepare writes
    finish_writing(out)  # of a preparation killed while it renamed its files
    if args.wikitext103:
        paths = [checked_file(args, "WikiText-103", file, "sha256", checksum, args.wikitext103_url,
                              "--wikitext103_url") for file, checksum in WIKITEXT103_FILES.items()]
        tokens = {"train": args.train_tokens, "val": args.val_tokens}
        articles = wikitext103_articles(paths, tokens, args.seed, args.min_chars, encode, eot_token)
        source = f"WikiText-103 (raw) train split, {args.wikitext103_url}, seed {args.seed}"
    else:
        inputs = wikitext2_files(args, args.wikitext2) or args.input
        val_inputs = wikitext2_files(args, args.wikitext2_val) or args.val_input
        articles = read_input(inputs)
        source = "local files: " + " ".join(inputs)
        if val_inputs:  # val.bin from these alone
            articles += [dict(a, val=True) for a in read_input(val_inputs)]
            source += "; val.bin from " + " ".join(val_inputs)
    meta = prepare(articles, out, args, source)
    # a run of the write-up's best encoder-decoder that ends in minutes on a CPU, with its config
    config, own = {"byte": ("cpu_encdec_mse_pos_sub", "wikitext2_valid_byte"),
                   "gpt2": ("cpu_gpt2_encdec_mse_pos_sub", "wikitext2_valid_gpt2c")}[args.tokenizer]
    command = (f"python train.py config/{config}.py" + f" --dataset={name}" * (name != own)
               + " --vocab_size=None" * (name != own and args.tokenizer == "gpt2")
               + " (minutes on a CPU; config/ has the baseline and the other variants)")
    if name == TRAIN_DEFAULT:  # the write-up's run
        command = "python train.py (the write-up's run: 9,000 steps, for a GPU)"
    print(f"wrote {out}: train {meta['train_tokens']:,} and val {meta['val_tokens']:,} "
          f"{args.tokenizer} tokens (vocab {meta['vocab_size']:,}); train on it: {command}")
    release_folder(out)  # done: a run may train on it now, even from this process's caller


if __name__ == "__main__":
    on_ctrl_c(lambda: stopped)
    main()
