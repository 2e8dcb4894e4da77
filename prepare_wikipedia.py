"""
A dataset for train.py, nanoGPT style: whole articles, a random share (--seed)
for val, each encoded and ended by end-of-text, into data/<name>/train.bin,
val.bin (uint16 token ids) and meta.json.

    python prepare_wikipedia.py  # train.py's default: data/wikitext103/
    python prepare_wikipedia.py --wikitext103 --input PATH/  # from your copies
    python prepare_wikipedia.py --wikitext2 --tokenizer=byte  # its valid.txt
    python prepare_wikipedia.py --input my_texts/ --name=mine  # any .txt files
"""
import glob
import hashlib
import json
import os
import re
import signal
import sys
import time

import numpy as np
import requests
import urllib3

from configurator import add_flag, argument_parser
from data import is_task
from machinery.files import hold_folder, make_folder, release_folder
from machinery.files import write_atomic, write_error
from machinery.process import STOPS, fail, on_ctrl_c
from text import get_tokenizer, read_articles, split_wikitext, without_nul

TRAIN_DEFAULT = "wikitext103"  # train.py's default; no flags prepare it
WRITE_UP_TOKENS = {"train": 38_276_830, "val": 4_341_780}  # the write-up's sizes
DATASET_FILES = ("train.bin", "val.bin", "meta.json")  # in the order written
# the line a stop ends with
stopped = "the dataset there stays whole; run the same command again to resume"

# -----------------------------------------------------------------------------
# the core: articles -> train/val split -> token ids -> the dataset
def prepare(articles, out, args, source):
    """Write the dataset of articles ({"title", "text", "val"?, "ids"?})."""
    encode, _, vocab_size, eot_token = get_tokenizer(args.tokenizer)
    marked = any("val" in a for a in articles)  # else a random share is val
    num_found = len(articles)
    articles = [a for a in articles if len(a["text"]) >= args.min_chars]
    # whole articles to val: no article has text in both splits
    is_val = np.array([a.get("val", False) for a in articles], bool)
    if not marked and args.val_fraction:  # val_fraction of them, at least one
        num_val = max(1, round(len(articles) * args.val_fraction))
        order = np.random.default_rng(args.seed).permutation(len(articles))
        is_val[order[:num_val]] = True
    if is_val.all() or marked and not is_val.any():
        empty = "train" if is_val.all() else "val"
        fail(f"no article of at least --min_chars={args.min_chars} characters for "
             f"{empty} in {source} ({num_found} found); give more text or lower it")
    splits = {"train": [], "val": []}
    for i, article in enumerate(articles):
        ids = article.get("ids")  # WikiText-103's come tokenized
        if ids is None:
            ids = np.array(encode(article["text"]) + [eot_token], np.uint16)
            print(f"tokenized {i + 1}/{len(articles)} articles", end="\r")
        splits["val" if is_val[i] else "train"].append(ids)
    print()
    ids = {s: np.concatenate([np.zeros(0, np.uint16), *a]) for s, a in splits.items()}
    meta = dict(tokenizer=args.tokenizer, vocab_size=vocab_size, eot_token=eot_token)
    if args.compact_vocab:  # the ids that occur, numbered densely in order
        compact = np.unique(np.concatenate([ids["train"], ids["val"], [eot_token]]))
        ids = {s: np.searchsorted(compact, a).astype(np.uint16) for s, a in ids.items()}
        # end-of-text, GPT-2's last id, is the last of them
        meta.update(vocab_size=len(compact), eot_token=len(compact) - 1,
                    full_vocab_size=vocab_size, compact_vocab=compact.tolist())
    files = {f"{s}.bin": a.tobytes() for s, a in ids.items()}
    # the sum tells preparations apart, the sha256 any damage
    for s, a in ids.items():
        meta.update({f"{s}_tokens": len(a), f"{s}_articles": len(splits[s]),
                     f"{s}_token_sum": int(a.sum(dtype=np.uint64)),
                     f"{s}_sha256": hashlib.sha256(files[f"{s}.bin"]).hexdigest()})
    meta.update(dtype="uint16", source=source, min_chars=args.min_chars,
                skipped_short_articles=num_found - len(articles),
                val_fraction=None if marked else args.val_fraction, seed=args.seed)
    files["meta.json"] = (json.dumps(meta, indent=2) + "\n").encode()
    write_dataset(out, files)
    return meta


def write_dataset(out, files):
    """All or nothing: each file written as <name>.new, then all renamed."""
    old = os.path.exists(os.path.join(out, "meta.json"))
    kept = f"; {out} keeps its old dataset" * old
    mask = getattr(signal, "pthread_sigmask", None)  # POSIX's; none on Windows
    global stopped  # what a stop says, once meta.json.new is whole
    try:
        for name in DATASET_FILES:  # meta.json.new last: all three are whole
            write_atomic(os.path.join(out, name + ".new"), files[name], kept)
        held = mask(signal.SIG_BLOCK, STOPS) if mask else None
    finally:  # else (full disk, Ctrl-C) the new files go, the old stay
        if finish_writing(out):
            stopped = f"the new dataset in {out} is whole and in place"
    if mask:
        mask(signal.SIG_SETMASK, held)


def finish_writing(out):
    """Rename each <name>.new over <name> if meta.json.new (the last) is; whether so."""
    whole = os.path.exists(os.path.join(out, "meta.json.new"))
    try:
        for name in DATASET_FILES:
            new = os.path.join(out, name + ".new")
            if whole and os.path.exists(new):
                os.replace(new, os.path.join(out, name))
            elif os.path.exists(new):
                os.remove(new)
    except OSError as e:  # e.g. a folder meta.json
        fail(f"{e.filename2 or e.filename} is in the way ({e.strerror}): move it")
    return whole

# -----------------------------------------------------------------------------
# where articles come from (files, WikiText-2, WikiText-103), and the flags
def read_input(paths):
    """The articles of .txt files and folders of them."""
    articles = []
    for path in paths:  # a missing one: read_text says so
        files = [path]
        if os.path.isdir(path):  # its .txt files (none if unreadable)
            files = sorted(glob.glob(os.path.join(glob.escape(path), "*")))
            files = [f for f in files if f.lower().endswith(".txt") and os.path.isfile(f)]
        for file in files:
            articles += read_articles(file)
    return articles


# WikiText-2 as pytorch/examples ships it: split -> file, checksum kind and value
# (train.txt's is its git blob id: the sha1 of b"blob <size>\0" + content)
WIKITEXT2_URL = ("https://raw.githubusercontent.com/pytorch/examples/main/"
                 "word_language_model/data/wikitext-2/")
WIKITEXT2_FILES = {
    "train": ("train.txt", "git-blob", "2d84b35af79e411d73ea7cae83c73964c6ac83b4"),
    "valid": ("valid.txt", "sha256",
              "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"),
    "test": ("test.txt", "sha256",
             "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0"),
}
# WikiText-103 (raw) on the Hugging Face hub, pinned: its train split
WIKITEXT103_URL = ("https://huggingface.co/datasets/Salesforce/wikitext/resolve/"
                   "b08601e04326c79dfdd32d625aee71d232d685c3/wikitext-103-raw-v1/")
WIKITEXT103_FILES = {
    "train-00000-of-00002.parquet":
        "74da360f23826045b3e6ac6375411fdb15f003030aa74f2596ed08b857cb9212",
    "train-00001-of-00002.parquet":
        "ba090ac30dbf5461e8dcbdd1a1b8e6f3cf9c2c756d64f0c1220450acd514f720",
}
TIMEOUT = (10, 30)  # seconds to connect, and to wait for each read
# bytes written at a time: a cut download resumes there
CHUNK = 1 << 20


class Retry(urllib3.util.Retry):
    """urllib3's, each wait said first: tries after 0, 2, 4, 8, 16 s."""
    def sleep(self, response=None):  # never a Retry-After's hours
        tries, last = len(self.history), self.history[-1]
        wait = self.get_backoff_time()
        why = f"HTTP {last.status}" if last.status else reason(last.error)
        print(f"  {why}; try {tries + 1} of {tries + self.total + 1} in {wait:.0f} s")
        time.sleep(wait)


RETRY = Retry(total=5, connect=2, backoff_factor=1,
              status_forcelist=[429, *range(500, 505)])


def reason(error):  # urllib3's (or requests') error in words
    cause = getattr(error.args[0] if error.args else None, "reason", None) or error
    return str(cause).split(": ", 1)[-1] or type(cause).__name__


def file_checksum(path, kind):
    """The file's sha256, or (kind git-blob) its git blob id, in hex."""
    blob = b"blob %d\0" % os.path.getsize(path)
    h = hashlib.sha256() if kind == "sha256" else hashlib.sha1(blob)
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def checked_file(args, what, name, kind, checksum, url, url_flag):
    """<out_dir>/<what>/name (downloaded if absent) or --input's, checked."""
    folder = os.path.join(args.out_dir, what.lower())
    if args.input:
        given = args.input[0]
        folder = given if os.path.isdir(given) else os.path.dirname(given)
    path = os.path.join(folder, name)
    if not os.path.exists(path) and args.input:
        fail(f"--input gives no copy of {what}'s {name}: give a folder holding it")
    if not os.path.exists(path):
        make_folder(folder)
        download(f"{url.rstrip('/')}/{name}", path, kind, checksum, url_flag,
                 f"Offline, copy {what}'s {name} into {folder}/ and run again")
    elif file_checksum(path, kind) != checksum:
        # never deleted: maybe your text
        own = f"; or use it as text: --input {path} --name=NAME" * path.endswith(".txt")
        fail(f"{path} is not {what}'s {name} as published; move it away{own}")
    return path


def download(url, path, kind, checksum, url_flag, offline):
    """url into path via path.part, resumed where cut, checked, renamed."""
    part = path + ".part"
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(max_retries=RETRY))
    session.mount("https://", session.adapters["http://"])
    have = os.path.getsize(part) if os.path.exists(part) else 0
    print(f"downloading {url}" + f" from byte {have:,}" * bool(have), flush=True)
    headers = {"Accept-Encoding": "identity"}  # raw bytes, for byte ranges
    headers.update({"Range": f"bytes={have}-"} if have else {})
    try:
        with session.get(url, headers=headers, stream=True, timeout=TIMEOUT) as r:
            # 206: the rest of the file; 200: all of it; 416: the part is whole
            if r.status_code != 416:
                r.raise_for_status()
                with open(part, "ab" if r.status_code == 206 else "wb") as f:
                    for chunk in r.iter_content(CHUNK):
                        f.write(chunk)
                        print(f"  {f.tell() / 1e6:,.1f} MB", end="\r")
        print()
    except requests.HTTPError as e:
        fail(f"{url} answered HTTP {e.response.status_code}; check {url_flag}")
    except requests.RequestException as e:  # a rerun resumes from the part
        fail(f"could not download {url} ({reason(e)}); no network? {offline}")
    except OSError as e:  # a full disk
        fail(f"could not write {part}: {write_error(part, e)}; run again to resume")
    if file_checksum(part, kind) != checksum:
        os.remove(part)
        fail(f"{url} does not have the expected {kind}; deleted: run again "
             f"or check {url_flag}")
    os.replace(part, path)


def wikitext2_files(args, split):
    """The checked files of a WikiText-2 split (valid, train, test, all; None)."""
    splits = WIKITEXT2_FILES if split == "all" else [split] if split else []
    return [checked_file(args, "WikiText-2", *WIKITEXT2_FILES[s], args.wikitext2_url,
                         "--wikitext2_url") for s in splits]


def wikitext103_articles(args, encode, eot_token):
    """Whole articles, with "ids", in --seed's order: val, then train."""
    import pyarrow.parquet as pq  # only here: the one Parquet reader
    paths = [checked_file(args, "WikiText-103", name, "sha256", checksum,
                          args.wikitext103_url, "--wikitext103_url")
             for name, checksum in WIKITEXT103_FILES.items()]
    # a row is a line of text with its newline: joined, the text file
    text = "".join(line for path in paths
                   for line in pq.read_table(path, columns=["text"])["text"].to_pylist())
    articles = without_nul(split_wikitext(text, "WikiText-103"))
    articles = [a for a in articles if len(a["text"]) >= args.min_chars]
    counts, chosen = {"val": 0, "train": 0}, []
    for i in np.random.default_rng(args.seed).permutation(len(articles)):
        if counts["train"] >= args.train_tokens:
            break
        split = "val" if counts["val"] < args.val_tokens else "train"
        ids = np.array(encode(articles[i]["text"]) + [eot_token], np.uint16)
        chosen.append(dict(articles[i], ids=ids, val=split == "val"))
        counts[split] += len(ids)
        print(f"tokenized {len(chosen):,} articles: {counts}", end="\r")
    if counts["train"] < args.train_tokens:
        fail(f"WikiText-103's train split has {sum(counts.values()):,} tokens; "
             "lower --train_tokens, --val_tokens or --min_chars")
    return chosen


def parse_args(argv):
    """The command line's flags, checked against each other."""
    parser = argument_parser(__doc__, "python prepare_wikipedia.py")
    add = parser.add_argument
    add_flag(parser, "--wikitext103", "WikiText-103's train split (the default)")
    add("--train_tokens", type=int, default=WRITE_UP_TOKENS["train"], help="its train")
    add("--val_tokens", type=int, default=WRITE_UP_TOKENS["val"], help="its val")
    add("--wikitext103_url", default=WIKITEXT103_URL, help="where its files are")
    add("--wikitext2", nargs="?", const="valid", choices=[*WIKITEXT2_FILES, "all"],
        help="WikiText-2's valid (default), train or test text, or all three")
    add("--wikitext2_val", choices=list(WIKITEXT2_FILES), help="val.bin's split")
    add("--wikitext2_url", default=WIKITEXT2_URL, help="where its files are")
    add("--input", nargs="+", metavar="PATH",
        help=".txt files, folders of them; with --wikitext2/103: copies of their files")
    add("--val_input", nargs="+", metavar="PATH", help="text for val.bin alone")
    add("--tokenizer", default="gpt2", help="gpt2 (GPT-2 BPE) or byte (UTF-8)")
    add_flag(parser, "--compact_vocab", "number the GPT-2 tokens that occur densely")
    add("--val_fraction", type=float, default=0.05, help="val.bin's share")
    add("--min_chars", type=int, default=500, help="skip shorter articles")
    add("--seed", type=int, default=1337, help="seed of the train/val split")
    add("--out_dir", default="data", help="folder of datasets and downloads")
    add("--name", help="dataset folder (default: what it holds or --input's name)")
    args = parser.parse_args(argv)
    if (args.wikitext2_val and not args.wikitext2) or (args.val_input and (
            args.wikitext2_val or not (args.input or args.wikitext2))):
        fail("--wikitext2_val or --val_input (one) gives the val text; "
             "add --wikitext2 or --input PATH")
    if args.wikitext103 and (args.wikitext2 or args.val_input):
        fail("--wikitext103 is a dataset alone; leave out --wikitext2, --val_input")
    args.wikitext103 = args.wikitext103 or not (args.input or args.wikitext2)
    args.sized = {"train": args.train_tokens, "val": args.val_tokens} != WRITE_UP_TOKENS
    if args.sized and not args.wikitext103:
        fail("--train_tokens and --val_tokens size WikiText-103; add --wikitext103")
    for flag, low, end in [("seed", 0, 2 ** 63), ("val_fraction", 0, 1),
                           ("train_tokens", 1, np.inf), ("val_tokens", 1, np.inf)]:
        value = getattr(args, flag)
        if not low <= value < end:
            fail(f"--{flag}={value} is out of range; use a value in [{low}, {end})")
    if args.compact_vocab and args.tokenizer != "gpt2":
        fail("--compact_vocab renumbers GPT-2 token ids; add --tokenizer gpt2")
    return args


def dataset_name(args):
    """--name, or a folder name saying what the dataset holds."""
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
        fail(f"--name={name} is not a folder name; use letters, digits, _ - and .")
    if is_task(name.lower()):
        fail(f"--name={name} is reserved for a task (tasks/); choose another --name")
    return name


def main(argv=None):
    args = parse_args(argv)
    # fail fast on a bad tokenizer name
    encode, _, _, eot_token = get_tokenizer(args.tokenizer)
    name = dataset_name(args)
    out = os.path.join(args.out_dir, name)
    argv = sys.argv[1:] if argv is None else argv
    command = " ".join(["prepare_wikipedia.py", *argv])
    make_folder(out, "--name")
    hold_folder(out, "--name", command)  # no run or other prepare uses it
    if finish_writing(out):  # of a prepare killed as it renamed
        print(f"{out}: a killed preparation's renames are done")
    if args.wikitext103:
        articles = wikitext103_articles(args, encode, eot_token)
        source = f"WikiText-103 (raw) train split, {args.wikitext103_url}, seed {args.seed}"
    else:
        inputs = wikitext2_files(args, args.wikitext2) or args.input
        val_inputs = wikitext2_files(args, args.wikitext2_val) or args.val_input or []
        articles = read_input(inputs)
        articles += [dict(a, val=True) for a in read_input(val_inputs)]
        source = "local files: " + " ".join(inputs)
        source += "; val.bin from " + " ".join(val_inputs) if val_inputs else ""
    meta = prepare(articles, out, args, source)
    # a run of the write-up's best encoder-decoder
    gpt2 = args.tokenizer == "gpt2"
    command = f"python train.py config/cpu{'_gpt2' * gpt2}_encdec_mse_pos_sub.py"
    if name != "wikitext2_valid_" + ("gpt2c" if gpt2 else "byte"):  # its own
        command += f" --dataset={name}" + " --vocab_size=None" * gpt2
    command += " (minutes on a CPU; config/ has the other variants)"
    if name == TRAIN_DEFAULT:
        command = "python train.py (the write-up's run: 9,000 steps, for a GPU)"
    print(f"wrote {out}: train {meta['train_tokens']:,} and val {meta['val_tokens']:,} "
          f"{args.tokenizer} tokens (vocab {meta['vocab_size']:,}); train on it: {command}")
    release_folder(out)  # a run may use it now, even our caller


if __name__ == "__main__":
    on_ctrl_c(lambda: stopped)
    try:
        main()
    finally:  # a stop now changes nothing (it gave a traceback at exit)
        for stop in STOPS:
            signal.signal(stop, signal.SIG_IGN)
