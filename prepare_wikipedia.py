"""
Prepare a Wikipedia dataset for train.py, nanoGPT style: token ids in
data/<name>/train.bin and val.bin (np.uint16), plus meta.json.

By default random English Wikipedia articles are fetched as plain text from the
MediaWiki Action API, one request at a time, and cached in articles.jsonl so that
an interrupted run continues where it stopped. --wikitext2 downloads a split of
WikiText-2 (as pytorch/examples ships it), checks it, and prepares it. --input
reads local UTF-8 .txt files (WikiText style is split into articles at
' = Title = ' lines), folders of .txt files, or an articles .jsonl. --wikitext103
downloads WikiText-103's train split (raw text, 314 MB of Parquet from the Hugging
Face hub, checked and resumable) and takes whole articles from it in a random order
until val.bin and train.bin hold the write-up's token counts (or --val_tokens and
--train_tokens). Offline, --input with --wikitext2 or --wikitext103 gives your copies
of their files instead of the download, checked the same way: the same dataset.

    python prepare_wikipedia.py --num_articles 5000
    python prepare_wikipedia.py --wikitext103  # -> data/wikitext103/: 38.3M train, 4.34M val tokens
    python prepare_wikipedia.py --wikitext103 --input PATH/  # the same, offline: its Parquet files
    python prepare_wikipedia.py --wikitext2 --tokenizer byte    # -> data/wikitext2_valid_byte/
    python prepare_wikipedia.py --wikitext2 --tokenizer byte --input valid.txt  # the same, offline
    python prepare_wikipedia.py --input my_texts/ --name mine

The tokenizers and the files' format are in data.py.
"""
import hashlib
import json
import os
import re
import sys
import time

import numpy as np
import requests
import urllib3

from configurator import add_flag, argument_parser
from data import (generated_task, get_tokenizer, load_jsonl, read_articles, split_wikitext,
                  without_nul)
from machinery.files import claim_folder, hold_folder, release_folder, write_atomic
from machinery.process import fail, on_ctrl_c

# Wikimedia asks API clients for a User-Agent naming the tool, its purpose and a contact
USER_AGENT = (f"autoregressive-encoder-decoder-transformer/0.1 (prepare_wikipedia.py: builds a "
              f"small language-modelling dataset from random articles; "
              f"https://example.org/replace-with-your-contact) "
              f"python-requests/{requests.__version__}")
MAX_TRIES = 6  # per request: 1 + 5 retries, waiting retry_delay * 1, 2, 4, 8, 16 seconds
MAX_WAIT = 120  # seconds: the longest wait between tries, whatever Retry-After asks
LONG_WAIT = 10  # seconds: a wait at least this long is announced
CONNECT_TIMEOUT, READ_TIMEOUT = 10, 30  # seconds, per connection attempt and per read
# seconds for a whole API request: a server trickling bytes never trips READ_TIMEOUT
REQUEST_DEADLINE = 60
DOWNLOAD_DEADLINE = 600  # seconds per download request; a cut download resumes where it stopped
MAX_MISSES = 1000  # requests in a row without a new article before giving up
MAX_NO_EXTRACT = 20  # answers in a row whose pages all lack an 'extract': the API cannot give text
WIKITEXT2_URL = ("https://raw.githubusercontent.com/pytorch/examples/main/"
                 "word_language_model/data/wikitext-2/")
# split -> file, checksum kind, checksum; train.txt is known only by its git blob id,
# the sha1 of b"blob <size>\0" + content
WIKITEXT2_FILES = {
    "train": ("train.txt", "git-blob", "2d84b35af79e411d73ea7cae83c73964c6ac83b4"),
    "valid": ("valid.txt", "sha256",
              "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"),
    "test": ("test.txt", "sha256",
             "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0"),
}
# WikiText-103 (raw) as the Hugging Face hub serves it (dataset Salesforce/wikitext, config
# wikitext-103-raw-v1): Parquet files with one line of text per row, at a pinned revision of the
# hub's repository
WIKITEXT103_URL = ("https://huggingface.co/datasets/Salesforce/wikitext/resolve/"
                   "b08601e04326c79dfdd32d625aee71d232d685c3/wikitext-103-raw-v1/")
# its train split's two shards (157 MB each) and their sha256s, from the hub's Git LFS pointers of
# that revision
WIKITEXT103_FILES = {
    "train-00000-of-00002.parquet":
        "74da360f23826045b3e6ac6375411fdb15f003030aa74f2596ed08b857cb9212",
    "train-00001-of-00002.parquet":
        "ba090ac30dbf5461e8dcbdd1a1b8e6f3cf9c2c756d64f0c1220450acd514f720",
}
# of the hub's repository: what the sha256s are of
WIKITEXT103_REVISION = WIKITEXT103_URL.split("/")[-3]
WIKITEXT103_MB = 314  # both shards
ASSUMED_MB_PER_S = 10  # for the time announced before a download starts
# the write-up's token files (uint16: 76,553,660 and 8,683,560 bytes): --wikitext103's default size
WRITE_UP_TOKENS = {"train": 38_276_830, "val": 4_341_780}
# dataset names the scripts give a meaning of their own, so a dataset prepared under one would
# never be read as such
RESERVED_NAMES = {  # and the names of the generated tasks of tasks/
    "wikitext-2": "it is the folder of the downloaded WikiText-2 files",
    "wikitext-103": "it is the folder of the downloaded WikiText-103 files",
}


# -----------------------------------------------------------------------------
# articles: the Wikipedia API, the JSONL cache, local files


class DeadlinePassed(requests.Timeout):
    """A request that took longer than its deadline in all."""


def read_body(r, seconds):
    """Yields a streamed response's body as it arrives, raising DeadlinePassed after `seconds` in
    all: the per-read timeout alone never trips on a server that sends a byte at a time."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            chunk = r.raw.read1(1 << 16, decode_content=True)
        except urllib3.exceptions.ReadTimeoutError as e:  # as requests' iter_content wraps them
            raise requests.ReadTimeout(e) from e
        except urllib3.exceptions.HTTPError as e:
            raise requests.ConnectionError(e) from e
        if not chunk:
            return
        yield chunk
        if time.monotonic() > deadline:
            raise DeadlinePassed(f"no complete answer within {seconds} s")


def unresolvable(e):
    """Whether a ConnectionError comes from a host name that does not resolve: no network, or a
    wrong URL. Retrying cannot help, so the caller stops at once."""
    reason = getattr(e.args[0], "reason", None) if e.args else None
    return isinstance(reason, urllib3.exceptions.NameResolutionError)


def retry_wait(attempt, retry_delay, retry_after, reason):
    """Seconds to wait before the next try: doubling from retry_delay, or what the server's
    Retry-After asks, capped at MAX_WAIT; a long wait is announced so that the run does not look
    stuck."""
    wait = retry_delay * 2 ** attempt
    if retry_after is not None and retry_after.strip().isdigit():
        wait = int(retry_after)  # the server knows best how long to back off
    capped = min(wait, MAX_WAIT)
    if capped >= LONG_WAIT:
        asked = ""
        if wait > MAX_WAIT:
            asked = f" (the server asked for {wait} s; this script waits {MAX_WAIT} s at most)"
        print(f"\n{reason}: waiting {capped:.0f} s before try {attempt + 2} of {MAX_TRIES}{asked}",
              file=sys.stderr, flush=True)
    return capped


def api_get(session, url, params, retry_delay):
    """GET the API with retries and exponential backoff; returns the decoded JSON object."""
    for attempt in range(MAX_TRIES):
        retry_after = None
        try:
            timeout = (CONNECT_TIMEOUT, READ_TIMEOUT)
            with session.get(url, params=params, timeout=timeout, stream=True) as r:
                retry_after = r.headers.get("Retry-After")
                if r.status_code == 429 or r.status_code >= 500:
                    raise requests.HTTPError(f"HTTP {r.status_code}")
                if r.status_code != 200:
                    fail(f"{url} answered HTTP {r.status_code}; check --api_url / --lang")
                body = b"".join(read_body(r, REQUEST_DEADLINE))
        except (requests.HTTPError, DeadlinePassed) as e:
            reason = str(e)
        except (requests.Timeout, requests.ConnectionError) as e:
            if unresolvable(e):
                fail(f"could not reach {url}: its host name does not resolve (no network?). "
                     f"Check your network or --api_url, or use --input PATH for local files.")
            reason = type(e).__name__
        else:
            try:
                data = json.loads(body)
            except ValueError:
                fail(f"{url} did not answer with JSON; check --api_url")
            if not isinstance(data, dict):
                fail(f"{url} answered a JSON {type(data).__name__}, not an object; "
                     f"is it a MediaWiki API? check --api_url")
            error = data.get("error")
            # maxlag: the servers are busy, retry
            if not (isinstance(error, dict) and error.get("code") == "maxlag"):
                if isinstance(error, dict):
                    fail(f"the API at {url} returned {error.get('code')}: {error.get('info')}")
                if error:
                    fail(f"the API at {url} returned an error: {error}")
                return data
            reason = "maxlag"
        if attempt + 1 < MAX_TRIES:
            time.sleep(retry_wait(attempt, retry_delay, retry_after, reason))
    fail(f"could not reach {url} after {MAX_TRIES} tries ({reason}). "
         f"Check your network, or use --input PATH for local files.")


def answer_pages(data, url):
    """The pages of an API answer, each checked to have an integer pageid and a text extract if
    any."""
    query = data.get("query", {})
    pages = query.get("pages", []) if isinstance(query, dict) else None
    # older MediaWiki versions ignore formatversion=2 and key the pages by id
    if isinstance(pages, dict):
        pages = list(pages.values())
    if not isinstance(pages, list) or not all(isinstance(page, dict) for page in pages):
        fail(f"{url} answered 'query' without a list of page objects: {json.dumps(data)[:200]}; "
             f"check --api_url")
    for page in pages:
        if not isinstance(page.get("pageid"), int) or isinstance(page["pageid"], bool):
            fail(f"{url} answered a page without an integer 'pageid': {json.dumps(page)[:200]}; "
                 f"check --api_url")
        if not isinstance(page.get("extract", ""), str):
            fail(f"{url} answered page {page['pageid']} with an 'extract' that is not text "
                 f"({type(page['extract']).__name__}); check --api_url")
    return pages


def fetch_articles(api_url, num_articles, min_chars, retry_delay, articles, cache_file):
    """Adds random articles to `articles` (pageid -> article) and appends each to cache_file."""
    session = requests.Session()
    session.headers["User-Agent"] = USER_AGENT
    # whole-article extracts come one page per request (exlimit > 1 needs exintro),
    # so the random generator is asked for one main-namespace (ns 0) page at a time
    params = dict(action="query", format="json", formatversion=2, maxlag=5,
                  generator="random", grnnamespace=0, grnlimit=1, grnminsize=min_chars,
                  prop="extracts", explaintext=1, exsectionformat="wiki", exlimit=1)
    num_requests = skipped = misses = 0
    kinds = ["repeats", "shorter than --min_chars", "without 'extract'", "empty answers"]
    sent = dict.fromkeys(kinds, 0)
    no_extract = 0  # answers in a row whose pages all lack an 'extract'
    try:
        while len(articles) < num_articles:
            data = api_get(session, api_url, params, retry_delay)
            pages = answer_pages(data, api_url)
            num_requests += 1
            misses += 1
            sent["empty answers"] += not pages
            if pages and all("extract" not in page for page in pages):
                no_extract += 1
            else:
                no_extract = 0
            if no_extract >= MAX_NO_EXTRACT:
                fail(f"{MAX_NO_EXTRACT} answers in a row had pages without an 'extract' "
                     f"(the last one: {json.dumps(data)[:200]}); "
                     f"the wiki at {api_url} may lack the TextExtracts extension")
            for page in pages:
                text = page.get("extract", "").strip()
                seen = page["pageid"] in articles
                # the random generator repeats pages; stubs are too short
                if seen or len(text) < min_chars:
                    skipped += 1
                    if seen:
                        sent["repeats"] += 1
                    elif "extract" not in page:
                        sent["without 'extract'"] += 1
                    else:
                        sent["shorter than --min_chars"] += 1
                    continue
                article = {"pageid": page["pageid"], "title": page.get("title", ""), "text": text}
                articles[page["pageid"]] = article
                cache_file.write(json.dumps(article, ensure_ascii=False) + "\n")
                cache_file.flush()  # an interruption loses at most the article being written
                misses = 0
                sent = dict.fromkeys(sent, 0)
            print(f"\rfetched {len(articles)}/{num_articles} articles "
                  f"({num_requests} requests, {skipped} repeats or stubs skipped)",
                  end="", flush=True)
            if misses >= MAX_MISSES:
                what = ", ".join(f"{n} {kind}" for kind, n in sent.items() if n)
                fail(f"{MAX_MISSES} requests in a row gave no new article of at least "
                     f"{min_chars} characters (the API sent: {what}); "
                     f"lower --min_chars or --num_articles")
    finally:
        if num_requests:
            print()  # end the progress line, also before an error message


def cached_articles(api_url, cache_path, num_articles, min_chars, retry_delay):
    """The first num_articles articles of the cache, fetched from the API into it where missing."""
    cached, clean = load_jsonl(cache_path) if os.path.exists(cache_path) else ({}, True)
    if not clean:  # rewrite without the truncated last line, so appends start on a fresh line
        lines = "".join(json.dumps(a, ensure_ascii=False) + "\n" for a in cached.values())
        write_atomic(cache_path, lines.encode("utf-8"))
    if cached:
        print(f"resuming: {len(cached)} articles already in {cache_path}")
    try:
        with open(cache_path, "a", encoding="utf-8") as cache_file:
            fetch_articles(api_url, num_articles, min_chars, retry_delay, cached, cache_file)
    except KeyboardInterrupt:
        print(f"interrupted: {len(cached)} articles are saved in {cache_path}; "
              f"run the same command again to continue", file=sys.stderr)
        sys.exit(130)
    return list(cached.values())[:num_articles]


def read_input(paths):
    """The articles of local .txt files (split at WikiText titles), folders of them, or .jsonl."""
    articles = []
    for path in paths:
        if not os.path.exists(path):
            link = ""
            if os.path.islink(path):
                link = f" (a link to {os.readlink(path)}, which does not exist)"
            fail(f"--input path not found: {path}{link}")
        if os.path.isdir(path):
            try:
                files = sorted(os.path.join(path, f) for f in os.listdir(path)
                               if f.endswith(".txt"))
            except OSError as e:
                fail(f"cannot read the folder {path} ({e.strerror}); "
                     f"make it readable, or give its files")
            for file in [file for file in files if not os.path.isfile(file)]:
                if os.path.isdir(file):
                    why = "a folder"
                elif os.path.islink(file):  # a broken link
                    why = f"a link to {os.readlink(file)}, which does not exist"
                else:
                    why = "not a file"
                print(f"note: skipped {file}: {why}")
                files.remove(file)
            if not files:
                fail(f"no .txt files in folder {path}; "
                     f"give .txt files, a folder of them, or an articles .jsonl")
        else:
            files = [path]
        for file in files:
            articles += read_articles(file)
    return articles

# -----------------------------------------------------------------------------
# WikiText-2, downloaded from the pytorch/examples repository


def file_checksum(path, kind):
    """The hex digest of the file at path: its sha256, or (kind git-blob) its git blob id."""
    if kind == "sha256":
        h = hashlib.sha256()
    else:  # git's blob id
        h = hashlib.sha1(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Progress:
    """One line, rewritten at most once a second: bytes so far (of size, when known), speed, time
    left."""

    def __init__(self, name, start, size):
        self.name, self.have, self.size, self.start = name, start, size, start
        self.t0 = self.shown = time.monotonic()

    def add(self, n):
        self.have += n
        if time.monotonic() - self.shown >= 1:
            self.show()

    def show(self):
        self.shown = time.monotonic()
        rate = (self.have - self.start) / max(self.shown - self.t0, 1e-9)
        left = " MB"
        if self.size:
            left = (f" of {self.size / 1e6:,.1f} MB, {rate / 1e6:.1f} MB/s, "
                    f"about {(self.size - self.have) / max(rate, 1):.0f} s left")
        print(f"\r  {self.name}: {self.have / 1e6:,.1f}{left}  ", end="", flush=True)

    def done(self):
        if self.shown > self.t0:  # a progress line was shown: end it
            self.show()
            print(flush=True)


def download(url, path, kind, checksum, retry_delay, url_option="--wikitext2_url",
             offline="Get the file another way and prepare it with --input PATH"):
    """Downloads url to path through path + '.part': a cut download resumes with an HTTP Range
    request, and path appears (by rename, so never half-written) only once its checksum matches. A
    line shows its progress. url_option and offline: what the error lines suggest."""
    part = path + ".part"
    # byte ranges of the file itself
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    attempt = 0
    while True:
        have = os.path.getsize(part) if os.path.exists(part) else 0
        retry_after = None
        try:
            ranged = {**headers, "Range": f"bytes={have}-"} if have else headers
            timeout = (CONNECT_TIMEOUT, READ_TIMEOUT)
            with requests.get(url, headers=ranged, timeout=timeout, stream=True) as r:
                retry_after = r.headers.get("Retry-After")
                if r.status_code == 416:  # no byte left after `have`: the part file is complete
                    break
                if r.status_code == 429 or r.status_code >= 500:
                    raise requests.HTTPError(f"HTTP {r.status_code}")
                if r.status_code not in (200, 206):
                    fail(f"{url} answered HTTP {r.status_code}; check {url_option}")
                content_range = r.headers.get("Content-Range", "")
                resumed = r.status_code == 206 and content_range.startswith(f"bytes {have}-")
                print(f"downloading {url}" + (f" from byte {have:,}" if resumed else ""),
                      flush=True)
                start = have if resumed else 0
                size = None
                if r.headers.get("Content-Length"):
                    size = start + int(r.headers.get("Content-Length", 0))
                # a server that ignores Range sends it all again
                with open(part, "ab" if resumed else "wb") as f:
                    progress = Progress(os.path.basename(path), start, size)
                    for chunk in read_body(r, DOWNLOAD_DEADLINE):
                        f.write(chunk)
                        progress.add(len(chunk))
                    progress.done()
            break
        except KeyboardInterrupt:
            print(f"\ninterrupted: run the same command again to resume the download of {url}",
                  file=sys.stderr)
            sys.exit(130)
        except (requests.HTTPError, DeadlinePassed) as e:
            reason = str(e)
        except (requests.Timeout, requests.ConnectionError) as e:
            if unresolvable(e):
                fail(f"could not download {url}: its host name does not resolve (no network?). "
                     f"{offline}")
            reason = type(e).__name__
        if os.path.exists(part) and os.path.getsize(part) > have:
            continue  # progress: resume at once, and this try does not count
        attempt += 1
        if attempt == MAX_TRIES:
            fail(f"could not download {url} after {MAX_TRIES} tries ({reason}); no network? "
                 f"{offline}")
        time.sleep(retry_wait(attempt - 1, retry_delay, retry_after, reason))
    if file_checksum(part, kind) != checksum:
        os.remove(part)
        fail(f"{os.path.basename(path)} from {url} does not have the expected {kind} {checksum}; "
             f"the download is deleted: run again, or check {url_option}")
    os.replace(part, path)


def set_aside(path, kind, checksum, expected):
    """Move a file that is not the expected one (`expected`, with its checksum) out of the way under
    a name that says why, never over another file: a copy the user put there is kept, and only a
    checked download takes its place."""
    aside, n = f"{path}.{kind}-mismatch", 1
    while os.path.lexists(aside):
        n += 1
        aside = f"{path}.{kind}-mismatch{n}"
    os.rename(path, aside)
    print(f"{path} is not {expected} (whose {kind} is {checksum}): kept as {aside}; "
          f"a checked copy is downloaded", flush=True)
    return aside


def checked(path, kind, checksum):
    """Whether the file at path is there and has the checksum."""
    return os.path.exists(path) and file_checksum(path, kind) == checksum


def wikitext2_names(split):
    """The file names of a WikiText-2 split (valid, train, test) or of all three."""
    return [WIKITEXT2_FILES[s][0] for s in (WIKITEXT2_FILES if split == "all" else [split])]


def wikitext2_files(split, url, folder, retry_delay):
    """The paths of the WikiText-2 files of `split` (valid, train, test or all), downloaded into
    folder when absent and checked."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    splits = WIKITEXT2_FILES if split == "all" else [split]
    for name, kind, checksum in [WIKITEXT2_FILES[s] for s in splits]:
        path = os.path.join(folder, name)
        if not checked(path, kind, checksum):
            # one download at a time into the folder: its .part files are shared
            hold_folder(folder, "--out_dir")
            # checked again: another process may have got it meanwhile
            if os.path.exists(path) and not checked(path, kind, checksum):
                set_aside(path, kind, checksum, f"WikiText-2's {name}")
            if not os.path.exists(path):
                offline = (f"Offline, give your copy of it: "
                           f"the same command with --input PATH/{name}")
                download(url.rstrip("/") + "/" + name, path, kind, checksum, retry_delay,
                         offline=offline)
        paths.append(path)
    return paths


def local_copies(paths, files, what):
    """{name: path} of the local copies of `files` ({name: (checksum kind, checksum)}) given with
    --input instead of downloading them: files, known by their checksum whatever their name, or
    folders holding them under their names. Each is checked as a download is; one line names a
    given file that is none of them, or one that is missing."""
    found = {}
    for path in paths:
        if os.path.isdir(path):
            for name, (kind, checksum) in files.items():
                if name not in found and os.path.isfile(os.path.join(path, name)):
                    candidate = os.path.join(path, name)
                    if file_checksum(candidate, kind) != checksum:
                        fail(f"{candidate} is not {what}'s {name}: its {kind} is not {checksum} "
                             f"(another revision, an edited copy, or Windows line endings?); "
                             f"give the file as it was published")
                    found[name] = candidate
            continue
        if not os.path.isfile(path):
            fail(f"--input path not found: {path}")
        match = [name for name, (kind, checksum) in files.items()
                 if file_checksum(path, kind) == checksum]
        if not match:
            fail(f"{path} is not {what}'s {' or '.join(files)}: its checksum is none of theirs "
                 f"(another revision, an edited copy, or Windows line endings?); "
                 f"give the file as it was published, or prepare your text "
                 f"under a name of its own: --input {path} --name=NAME")
        found.setdefault(match[0], path)
    missing = [name for name in files if name not in found]
    if missing:
        them = "them" if len(missing) > 1 else "it"
        fail(f"--input gives no copy of {what}'s {' and '.join(missing)}; add {them} "
             f"(a folder holding {them} will do)")
    return {name: found[name] for name in files}


def wikitext2_inputs(args):
    """--wikitext2's train and val paths: your copies given with --input, checked, or downloads."""
    if not args.input:  # downloaded into <out_dir>/wikitext-2/ where absent
        folder = os.path.join(args.out_dir, "wikitext-2")
        paths = wikitext2_files(args.wikitext2, args.wikitext2_url, folder, args.retry_delay)
        if not args.wikitext2_val:
            return paths, args.val_input
        val_paths = wikitext2_files(args.wikitext2_val, args.wikitext2_url, folder,
                                    args.retry_delay)
        return paths, val_paths
    # the user's copies, checked: the dataset a download would give, offline
    wanted = wikitext2_names(args.wikitext2)
    if args.wikitext2_val:
        wanted += wikitext2_names(args.wikitext2_val)
    files = {name: (kind, checksum) for name, kind, checksum in WIKITEXT2_FILES.values()
             if name in wanted}
    found = local_copies(args.input, files, "WikiText-2")
    paths = [found[name] for name in wikitext2_names(args.wikitext2)]
    if not args.wikitext2_val:
        return paths, args.val_input
    return paths, [found[name] for name in wikitext2_names(args.wikitext2_val)]

# -----------------------------------------------------------------------------
# WikiText-103's train split, from the Hugging Face hub: articles until the token counts asked for


def wikitext103_files(url, folder, retry_delay):
    """The paths of WikiText-103's train shards, downloaded into folder (after announcing the size
    and time) where absent, each checked against its sha256; a folder that holds them whole needs no
    network."""
    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(folder, name) for name in WIKITEXT103_FILES]
    unchecked = [(path, checksum) for path, checksum in zip(paths, WIKITEXT103_FILES.values())
                 if not checked(path, "sha256", checksum)]
    if unchecked:
        # one download at a time into the folder: its .part files are shared
        hold_folder(folder, "--out_dir")
    # checked again: another process may have got it meanwhile
    aside = [set_aside(path, "sha256", checksum,
                       f"{os.path.basename(path)} of revision {WIKITEXT103_REVISION}")
             for path, checksum in unchecked
             if os.path.exists(path) and not checked(path, "sha256", checksum)]
    missing = [path for path in paths if not os.path.exists(path)]
    if missing:
        have = sum(os.path.getsize(path + ".part") for path in missing
                   if os.path.exists(path + ".part")) / 1e6
        todo = WIKITEXT103_MB * len(missing) / len(paths) - have
        print(f"WikiText-103 (raw), train split: {len(missing)} Parquet file(s), "
              f"about {todo:.0f} MB to download into {folder}/"
              + (f" ({have:.0f} MB already there)" if have else "")
              + f": about {todo / ASSUMED_MB_PER_S / 60:.0f} min at {ASSUMED_MB_PER_S} MB/s",
              flush=True)
    offline = (f"Copy the files {', '.join(WIKITEXT103_FILES)} of revision {WIKITEXT103_REVISION} "
               f"(their sha256s are in prepare_wikipedia.py) from a machine with network "
               f"into {folder}/, then run the same command")
    if aside:
        offline += f"; the copies whose sha256 differed are kept as {', '.join(aside)}"
    for path, checksum in zip(paths, WIKITEXT103_FILES.values()):
        if not os.path.exists(path):
            download(url.rstrip("/") + "/" + os.path.basename(path), path, "sha256", checksum,
                     retry_delay, url_option="--wikitext103_url", offline=offline)
    return paths


def wikitext103_inputs(args):
    """WikiText-103's train shards: your copies given with --input, checked, or downloads."""
    if args.input:
        files = {name: ("sha256", checksum) for name, checksum in WIKITEXT103_FILES.items()}
        return list(local_copies(args.input, files, "WikiText-103").values())
    folder = os.path.join(args.out_dir, "wikitext-103")
    return wikitext103_files(args.wikitext103_url, folder, args.retry_delay)


def wikitext103_articles(paths, tokens, seed, min_chars, encode, eot_token):
    """Whole articles of the shards, in a random order (seed): val articles until val holds
    tokens['val'] tokens, then train articles until train holds tokens['train']. Each article
    carries its token ids (and 'val')."""
    try:
        import pyarrow.parquet as pq  # only here: the one reader of Parquet files
    except ImportError:
        fail("--wikitext103 reads Parquet files, which needs pyarrow: pip install pyarrow")
    print(f"reading {len(paths)} Parquet file(s)", flush=True)
    try:  # a row is a line of the split's text, with its newline: joined, they are the text file
        text = "".join(line for path in paths
                       for line in pq.read_table(path, columns=["text"])["text"].to_pylist())
    except Exception as e:  # checked files cannot fail here, unless pyarrow itself is broken
        fail(f"could not read the Parquet files in {os.path.dirname(paths[0])}/ "
             f"({type(e).__name__}: {e}); delete them and run again")
    articles = [a for a in split_wikitext(text, "WikiText-103") if len(a["text"]) >= min_chars]
    del text
    wanted = tokens["val"] + tokens["train"]
    print(f"{len(articles):,} articles; taking whole ones in a random order "
          f"until val has {tokens['val']:,} and train {tokens['train']:,} tokens", flush=True)
    counts, chosen, t0 = {"val": 0, "train": 0}, [], time.time()

    def show_progress():
        done = sum(counts.values())
        seconds_left = max(0, wanted - done) / done * (time.time() - t0)
        print(f"\rtokenized {len(chosen):,} articles: "
              f"val {counts['val']:,}, train {counts['train']:,} tokens "
              f"({done / wanted:.0%}, about {seconds_left:.0f} s left)", end="", flush=True)
    for i in np.random.default_rng(seed).permutation(len(articles)):
        split = "val" if counts["val"] < tokens["val"] else "train"
        if split == "train" and counts["train"] >= tokens["train"]:
            break
        ids = np.array(encode(articles[i]["text"]) + [eot_token], dtype=np.uint16)
        chosen.append(dict(articles[i], ids=ids, val=split == "val"))
        counts[split] += len(ids)
        if len(chosen) % 500 == 0:
            show_progress()
    show_progress()
    print()
    if counts["train"] < tokens["train"]:
        fail(f"WikiText-103's train split has {sum(counts.values()):,} tokens in articles "
             f"of at least --min_chars={min_chars} characters, "
             f"fewer than the {wanted:,} asked for; lower --train_tokens or --val_tokens")
    return chosen

# -----------------------------------------------------------------------------
# the dataset: its flags, its name and folder, the train/val split, the token ids


def parse_args(argv):
    """The command line's flags, checked against each other."""
    parser = argument_parser(__doc__, "python prepare_wikipedia.py")
    parser.add_argument("--num_articles", type=int, default=5000,
                        help="articles to fetch from Wikipedia")
    parser.add_argument("--lang", default="en", help="Wikipedia language code, e.g. en, de, fr")
    parser.add_argument("--api_url", default=None, help="MediaWiki API URL (default: from --lang)")
    parser.add_argument("--min_chars", type=int, default=500,
                        help="skip articles shorter than this")
    parser.add_argument("--retry_delay", type=float, default=1.0,
                        help="first backoff delay in seconds")
    parser.add_argument("--input", nargs="+", metavar="PATH",
                        help="local .txt / folder / .jsonl instead of the API; "
                             "with --wikitext2 or --wikitext103: your copies of their files "
                             "(or a folder holding them), checked, instead of downloading")
    parser.add_argument("--wikitext2", nargs="?", const="valid", choices=[*WIKITEXT2_FILES, "all"],
                        help="download WikiText-2's valid (default), train or test text, "
                             "or all three, into <out_dir>/wikitext-2/ "
                             "and prepare it as --input would")
    parser.add_argument("--wikitext2_val", choices=list(WIKITEXT2_FILES), default=None,
                        help="with --wikitext2: download this split too and make it val.bin alone, "
                             "e.g. --wikitext2=valid --wikitext2_val=test")
    parser.add_argument("--val_input", nargs="+", metavar="PATH",
                        help="local text for val.bin alone; "
                             "every article of --input then goes to train.bin")
    parser.add_argument("--wikitext2_url", default=WIKITEXT2_URL,
                        help="where the WikiText-2 .txt files are")
    add_flag(parser, "--wikitext103",
             "download WikiText-103's train split (raw; 314 MB of Parquet, pyarrow reads it) "
             "into <out_dir>/wikitext-103/ and take whole articles in a random order (--seed) "
             "until val and train hold --val_tokens and --train_tokens tokens")
    parser.add_argument("--train_tokens", type=int, default=WRITE_UP_TOKENS["train"],
                        help="with --wikitext103: tokens of train.bin "
                             "(default: the write-up's %(default)s)")
    parser.add_argument("--val_tokens", type=int, default=WRITE_UP_TOKENS["val"],
                        help="with --wikitext103: tokens of val.bin "
                             "(default: the write-up's %(default)s)")
    parser.add_argument("--wikitext103_url", default=WIKITEXT103_URL,
                        help="where WikiText-103's Parquet files are")
    parser.add_argument("--tokenizer", default="gpt2",
                        help="gpt2 (GPT-2 BPE) or byte (UTF-8 bytes)")
    add_flag(parser, "--compact_vocab",
             "renumber the token ids that occur (plus end-of-text) densely: a smaller output layer")
    parser.add_argument("--val_fraction", type=float, default=0.05,
                        help="fraction of articles for val.bin")
    parser.add_argument("--seed", type=int, default=1337, help="seed of the train/val split")
    parser.add_argument("--out_dir", default="data",
                        help="the folder of the datasets (and of the downloads)")
    parser.add_argument("--name", default=None,
                        help="dataset folder name (default: wikipedia, wikipedia_<lang>, "
                             "wikitext2_<split>_<tokenizer> or wikitext103[_<train>-<val>][_byte], "
                             "+ c with --compact_vocab)")
    args = parser.parse_args(argv)
    if args.wikitext2_val and not args.wikitext2:
        fail("--wikitext2_val names the val split of a --wikitext2 dataset; "
             "add --wikitext2=valid (or train)")
    if args.val_input and (not (args.input or args.wikitext2) or args.wikitext2_val):
        fail("--val_input gives the val text of an --input or --wikitext2 dataset "
             "(not with --wikitext2_val)")
    if args.wikitext103 and (args.wikitext2 or args.val_input):
        fail("--wikitext103 is a dataset of its own; leave out --wikitext2 and --val_input")
    tokens = {"train": args.train_tokens, "val": args.val_tokens}
    if not args.wikitext103 and tokens != WRITE_UP_TOKENS:
        fail("--train_tokens and --val_tokens size a --wikitext103 dataset; add --wikitext103")
    if args.train_tokens < 1 or args.val_tokens < 1:
        fail(f"--train_tokens and --val_tokens must be at least 1, "
             f"got {args.train_tokens} and {args.val_tokens}")
    if args.num_articles < 1:
        fail(f"--num_articles must be at least 1, got {args.num_articles}")
    if not 0 <= args.val_fraction < 1:
        fail(f"--val_fraction must be in [0, 1), got {args.val_fraction}")
    if not 0 <= args.seed < 2 ** 63:
        fail(f"--seed must be an integer from 0 to 2**63 - 1, got {args.seed}")
    return args


def dataset_name(args):
    """The dataset's folder name: --name, or one saying what it holds; stops on a bad name."""
    tokens = {"train": args.train_tokens, "val": args.val_tokens}
    sizes = "" if tokens == WRITE_UP_TOKENS else f"_{args.train_tokens}-{args.val_tokens}"
    compact = "c" * args.compact_vocab
    if args.name:
        name = args.name
    elif args.wikitext2:
        wikitext2 = f"{args.wikitext2}{'-' + args.wikitext2_val if args.wikitext2_val else ''}"
        name = f"wikitext2_{wikitext2}_{args.tokenizer}{compact}"
    elif args.wikitext103:
        name = f"wikitext103{sizes}{'_byte' * (args.tokenizer == 'byte')}{compact}"
    elif args.input:
        name = os.path.splitext(os.path.basename(os.path.normpath(args.input[0])))[0]
    else:
        name = "wikipedia" if args.lang == "en" else f"wikipedia_{args.lang}"
    if not re.fullmatch(r"[\w.-]+", name) or name in (".", ".."):
        fail(f"--name={name} is not a folder name; use letters, digits, '_', '-' and '.', "
             f"e.g. --name=mytext")
    if generated_task(name.lower()):
        fail(f"--name={name} is reserved: train.py --dataset={name.lower()} trains its generated "
             f"task (tasks/{name.lower()}.py), not data/{name}; choose another --name, e.g. "
             f"--name={name}_text")
    if name.lower() in RESERVED_NAMES:  # also on a file system that ignores case
        fail(f"--name={name} is reserved: {RESERVED_NAMES[name.lower()]}; choose another --name, "
             f"e.g. --name={name}_text")
    return name


def val_articles(articles, marked, val_fraction, seed, min_chars):
    """Which articles go to val.bin: those marked val (marked), or a random val_fraction of them."""
    if marked:
        is_val = np.array([a.get("val", False) for a in articles])
        if is_val.all() or not is_val.any():
            fail(f"{'no train' if is_val.all() else 'no val'} article of at least "
                 f"--min_chars={min_chars} characters; give more text or lower --min_chars")
        return is_val
    num_val = round(len(articles) * val_fraction)
    if val_fraction > 0:
        num_val = max(1, num_val)
    if num_val >= len(articles):
        fail(f"{len(articles)} article(s) are too few to split with --val_fraction={val_fraction}; "
             f"give more text or use --val_fraction 0")
    is_val = np.zeros(len(articles), dtype=bool)
    is_val[np.random.default_rng(seed).permutation(len(articles))[:num_val]] = True
    return is_val


def tokenize(articles, is_val, encode, eot_token):
    """{'train': [ids, ...], 'val': [...]}: each article's token ids, then the end-of-text token."""
    splits = {"train": [], "val": []}
    for i, article in enumerate(articles):
        if "ids" in article:  # WikiText-103's articles come tokenized
            ids = article["ids"]
        else:
            ids = np.array(encode(article["text"]) + [eot_token], dtype=np.uint16)
        splits["val" if is_val[i] else "train"].append(ids)
        if "ids" not in article and ((i + 1) % 100 == 0 or i + 1 == len(articles)):
            print(f"\rtokenized {i + 1}/{len(articles)} articles", end="", flush=True)
    return splits


def compact(splits, vocab_size, eot_token):
    """The splits with the ids that occur renumbered densely, and meta.json's entries for it."""
    # 0 .. n-1 in the order of the original ids; the end-of-text token always among them
    compact_vocab = np.unique(np.concatenate([*splits["train"], *splits["val"], [eot_token]]))
    dense = np.zeros(vocab_size, dtype=np.uint16)
    dense[compact_vocab] = np.arange(len(compact_vocab))
    splits = {split: [dense[ids] for ids in arrays] for split, arrays in splits.items()}
    return splits, dict(vocab_size=len(compact_vocab), eot_token=int(dense[eot_token]),
                        full_vocab_size=vocab_size, compact_vocab=compact_vocab.tolist())


def say_what_is_replaced(out):
    """Prints what the dataset already in out holds: runs trained on it will notice the change."""
    if not os.path.exists(os.path.join(out, "meta.json")):
        return
    try:
        with open(os.path.join(out, "meta.json"), encoding="utf-8") as f:
            old = json.load(f)
        print(f"replacing {out}: {old.get('tokenizer')} tokens, "
              f"train {old.get('train_tokens', 0):,}, val {old.get('val_tokens', 0):,}, "
              f"from {old.get('source')}")
    except (OSError, ValueError, AttributeError):
        print(f"replacing {out}, whose meta.json is unreadable")


def main(argv=None):
    args = parse_args(argv)
    encode, _, vocab_size, eot_token = get_tokenizer(args.tokenizer)  # fail fast on a bad name
    if args.compact_vocab and args.tokenizer != "gpt2":
        fail("--compact_vocab renumbers GPT-2 token ids; use it with --tokenizer gpt2")
    name = dataset_name(args)
    if args.wikitext2:  # from here on exactly as --input (and --val_input) with its files
        args.input, args.val_input = wikitext2_inputs(args)
    out = os.path.join(args.out_dir, name)
    # held, not while a run trains on it, nor another prepare writes there (its temporary files)
    claim_folder(out, " ".join(["prepare_wikipedia.py", *(sys.argv[1:] if argv is None else argv)]),
                 held_as="--name")
    t0 = time.time()

    # read or fetch the articles
    if args.wikitext103:
        tokens = {"train": args.train_tokens, "val": args.val_tokens}
        articles = wikitext103_articles(wikitext103_inputs(args), tokens, args.seed,
                                        args.min_chars, encode, eot_token)
        source = (f"WikiText-103 (raw) train split, {args.wikitext103_url}: "
                  f"whole articles in a random order (seed {args.seed}), "
                  f"val until {args.val_tokens:,} tokens, then train until {args.train_tokens:,}")
    elif args.input:
        articles = read_input(args.input)
        source = "local files: " + " ".join(args.input)
        if args.val_input:  # val.bin from these alone
            articles += [dict(a, val=True) for a in read_input(args.val_input)]
            source += "; val.bin from " + " ".join(args.val_input)
    else:
        api_url = args.api_url or f"https://{args.lang}.wikipedia.org/w/api.php"
        cache_path = os.path.join(out, "articles.jsonl")
        articles = cached_articles(api_url, cache_path, args.num_articles, args.min_chars,
                                   args.retry_delay)
        source = f"{api_url}: random namespace-0 articles as plain-text extracts"
    articles = without_nul(articles)
    num_found = len(articles)
    articles = [a for a in articles if len(a["text"]) >= args.min_chars]
    if not articles:
        fail(f"no article of at least --min_chars={args.min_chars} characters in {source} "
             f"({num_found} found); give more text or lower --min_chars")
    # split by whole articles, so no article has text in both train and val
    val_marked = bool(args.val_input or args.wikitext103)
    is_val = val_articles(articles, val_marked, args.val_fraction, args.seed, args.min_chars)

    # tokenize; each article is followed by the end-of-text token
    assert vocab_size <= 2 ** 16, "token ids must fit in uint16"
    splits = tokenize(articles, is_val, encode, eot_token)
    if not args.wikitext103:
        print()
    meta = {"tokenizer": args.tokenizer, "vocab_size": vocab_size, "eot_token": eot_token,
            "dtype": "uint16"}
    if args.compact_vocab:  # the same segmentation, a smaller output layer
        splits, compact_meta = compact(splits, vocab_size, eot_token)
        meta.update(compact_meta)

    # write train.bin, val.bin and meta.json
    say_what_is_replaced(out)
    for split, arrays in splits.items():
        ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.uint16)
        write_atomic(os.path.join(out, f"{split}.bin"), ids.tobytes())
        meta[f"{split}_tokens"], meta[f"{split}_articles"] = len(ids), len(arrays)
        # train.py tells files of two preparations apart
        meta[f"{split}_token_sum"] = int(ids.sum(dtype=np.uint64))
    meta.update(source=source, min_chars=args.min_chars,
                skipped_short_articles=num_found - len(articles),
                val_fraction=None if val_marked else args.val_fraction, seed=args.seed)
    meta_json = json.dumps(meta, indent=2) + "\n"
    write_atomic(os.path.join(out, "meta.json"), meta_json.encode("utf-8"))
    vocab = f"{meta['vocab_size']:,}{' compacted' * args.compact_vocab}"
    print(f"wrote {out}: "
          f"train {meta['train_tokens']:,} tokens ({meta['train_articles']} articles), "
          f"val {meta['val_tokens']:,} tokens ({meta['val_articles']} articles), "
          f"{args.tokenizer} tokenizer (vocab {vocab}), {time.time() - t0:.1f}s")
    release_folder(out)  # done: a run may train on it now, even from this process's caller


if __name__ == "__main__":
    on_ctrl_c("every file written so far is whole (the fetched articles are cached); "
              "run the same command again")
    main()
