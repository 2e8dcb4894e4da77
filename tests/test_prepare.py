"""Specifications of prepare_wikipedia.py: WikiText-2 and WikiText-103 downloads with their faults, local input,
and the files it writes, all or nothing. CPU only, no network beyond 127.0.0.1. (The tokenizers and split_wikitext:
test_data.py.)

    python -m pytest -q tests/test_prepare.py
"""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import data
from text import get_tokenizer, split_wikitext, without_nul
import prepare_wikipedia as pw
from conftest import (ENV, ROOT, TINY, assert_interrupted, assert_one_line_error, fill, holding, interrupted_at,
                      make_wikitext, prepare_wikitext2, run, stops_at_their_defaults, wikitext, word_articles)


def files_in(folder):
    """The files of folder, less the hidden ones a folder lock keeps there."""
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))

# -----------------------------------------------------------------------------
# WikiText-2 downloads


def test_git_blob_checksum_is_what_git_hash_object_prints(tmp_path):
    (tmp_path / "hello").write_bytes(b"hello\n")
    assert pw.file_checksum(str(tmp_path / "hello"), "git-blob") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_wikitext2_download_prepares_token_for_token_what_input_prepares(wikitext2_host, tmp_path):
    prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2")
    cache = tmp_path / "wikitext-2"
    assert files_in(cache) == ["valid.txt"] and (cache / "valid.txt").read_bytes() == wikitext(1)
    pw.main(["--input", str(cache / "valid.txt"), "--min_chars", "0", "--tokenizer", "byte",
             "--out_dir", str(tmp_path), "--name", "by_input"])
    for f in ("train.bin", "val.bin"):
        assert (tmp_path / "wikitext2_valid_byte" / f).read_bytes() == (tmp_path / "by_input" / f).read_bytes()
    prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2")  # cached: checked, not downloaded again
    assert wikitext2_host.ranges == [("valid.txt", None)]


@pytest.mark.parametrize("split, val", [("valid", None), ("valid", "test"), ("all", None)])
@pytest.mark.parametrize("given", ["files", "folder"])
def test_wikitext2_from_local_copies_prepares_offline_what_the_download_prepares(wikitext2_host, tmp_path, split, val,
                                                                                given):
    """--wikitext2 with --input: your copies under their published names (the files, or their folder), checked,
    stand for the download; the dataset, under the name the configs look for, is the same token for token."""
    copies = tmp_path / "copies"
    copies.mkdir()
    for name, body in wikitext2_host.files.items():
        (copies / name).write_bytes(body)
    options = [f"--wikitext2={split}"] + [f"--wikitext2_val={val}"] * bool(val)
    names = [f for s in (split, val or "valid") for f in (["train.txt", "valid.txt", "test.txt"] if s == "all"
                                                           else [f"{s}.txt"])]
    local = [str(copies / name) for name in names] if given == "files" else [str(copies)]
    prepare_wikitext2(wikitext2_host, tmp_path / "offline", *options, "--input", *local)
    assert wikitext2_host.ranges == []  # nothing downloaded
    prepare_wikitext2(wikitext2_host, tmp_path / "online", *options)
    name = f"wikitext2_{split}{'-' + val if val else ''}_byte"
    for f in ("train.bin", "val.bin"):
        assert (tmp_path / "offline" / name / f).read_bytes() == (tmp_path / "online" / name / f).read_bytes()


def test_wikitext2_input_that_is_not_the_split_or_lacks_one_is_one_line_error(wikitext2_host, tmp_path):
    (tmp_path / "valid.txt").write_bytes(wikitext(1).replace(b"\n", b"\r\n"))  # a Windows copy: other bytes
    with pytest.raises(SystemExit) as e:
        prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2=valid", "--input", str(tmp_path / "valid.txt"))
    assert_one_line_error(str(e.value.code), "valid.txt is not WikiText-2's valid.txt as published", "--name=NAME")
    (tmp_path / "valid.txt").write_bytes(wikitext(1))
    with pytest.raises(SystemExit) as e:
        prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2=valid", "--wikitext2_val=test", "--input",
                          str(tmp_path))  # a folder holding valid.txt, but no test.txt
    assert_one_line_error(str(e.value.code), "no copy of WikiText-2's test.txt")
    assert wikitext2_host.ranges == []


def test_wikitext2_val_makes_val_bin_of_that_split_alone_as_val_input_does(wikitext2_host, tmp_path):
    prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2=valid", "--wikitext2_val=test")
    cache, out = tmp_path / "wikitext-2", tmp_path / "wikitext2_valid-test_byte"
    assert files_in(cache) == ["test.txt", "valid.txt"]
    pw.main(["--input", str(cache / "valid.txt"), "--val_input", str(cache / "test.txt"), "--min_chars", "0",
             "--tokenizer", "byte", "--out_dir", str(tmp_path), "--name", "by_input"])
    for f in ("train.bin", "val.bin"):
        assert (out / f).read_bytes() == (tmp_path / "by_input" / f).read_bytes()
    encode, _, _, eot = get_tokenizer("byte")
    whole = {split: b"".join(bytes(encode(a["text"]) + [eot]) for a in split_wikitext(wikitext(i).decode(), ""))
             for split, i in (("train", 1), ("val", 2))}  # every article of valid.txt trains, every one of test.txt
    assert (out / "train.bin").read_bytes() == np.frombuffer(whole["train"], np.uint8).astype(np.uint16).tobytes()
    assert (out / "val.bin").read_bytes() == np.frombuffer(whole["val"], np.uint8).astype(np.uint16).tobytes()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["val_fraction"] is None and meta["val_articles"] == len(split_wikitext(wikitext(2).decode(), ""))


@pytest.mark.parametrize("args, fragment", [
    (["--wikitext2_val=test"], "add --wikitext2 or --input PATH"),
    (["--val_input", "x.txt"], "--val_input (one) gives the val text"),
    (["--wikitext2", "--wikitext2_val=test", "--val_input", "x.txt"], "--val_input (one) gives the val text"),
])
def test_val_split_options_without_their_dataset_are_one_line_errors(tmp_path, args, fragment):
    assert_one_line_error(run("prepare_wikipedia.py", *args, cwd=tmp_path, check=False), fragment)


@pytest.mark.parametrize("flag, value", [("seed", "-1"), ("seed", str(2 ** 63)), ("val_fraction", "1.0"),
                                         ("val_fraction", "-0.1"), ("train_tokens", "0"), ("val_tokens", "-5")])
def test_a_value_out_of_its_range_is_one_line_error_before_anything_is_written(tmp_path, flag, value):
    (tmp_path / "t.txt").write_text(" = T = \n Text .\n")
    extra = ["--wikitext103"] if flag.endswith("tokens") else ["--input", "t.txt"]
    result = run("prepare_wikipedia.py", *extra, f"--{flag}={value}", cwd=tmp_path, check=False)
    assert_one_line_error(result, f"--{flag}={value} is out of range; use a value in [")
    assert not (tmp_path / "data").exists()


def test_wikitext2_all_downloads_and_checks_the_three_files(wikitext2_host, tmp_path):
    prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2=all")
    assert files_in(tmp_path / "wikitext-2") == ["test.txt", "train.txt", "valid.txt"]
    meta = json.load(open(tmp_path / "wikitext2_all_byte" / "meta.json"))
    assert meta["train_articles"] + meta["val_articles"] == 24


def test_cut_download_is_one_line_and_run_again_resumes_with_a_range_request(wikitext2_host, tmp_path, monkeypatch):
    monkeypatch.setattr(pw, "CHUNK", 64)
    wikitext2_host.cut = {"valid.txt"}
    with pytest.raises(SystemExit) as e:
        prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2=valid")
    assert_one_line_error(str(e.value.code), "could not download", "valid.txt")
    prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2=valid")
    half = len(wikitext(1)) // 2
    assert wikitext2_host.ranges == [("valid.txt", None), ("valid.txt", f"bytes={half - half % 64}-")]
    assert (tmp_path / "wikitext-2" / "valid.txt").read_bytes() == wikitext(1)


@pytest.mark.parametrize("ignore_range", [False, True])
def test_partial_download_of_an_earlier_run_is_resumed_or_restarted(wikitext2_host, tmp_path, ignore_range):
    wikitext2_host.ignore_range = ignore_range  # then the whole file comes again, and replaces the part
    (tmp_path / "wikitext-2").mkdir()
    (tmp_path / "wikitext-2" / "test.txt.part").write_bytes(wikitext(2)[:100])
    prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2=test")
    assert wikitext2_host.ranges == [("test.txt", "bytes=100-")]
    assert files_in(tmp_path / "wikitext-2") == ["test.txt"]
    assert (tmp_path / "wikitext-2" / "test.txt").read_bytes() == wikitext(2)


def test_checksum_mismatch_names_the_file_and_deletes_the_download(wikitext2_host, tmp_path):
    wikitext2_host.files["valid.txt"] = wikitext(1).replace(b"Sentence", b"Sentences")
    with pytest.raises(SystemExit) as e:
        prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2")
    assert_one_line_error(str(e.value.code), "valid.txt does not have the expected sha256", "deleted")
    assert files_in(tmp_path / "wikitext-2") == []


def test_wikitext2_host_down_is_one_line_error_suggesting_input(tmp_path, monkeypatch):
    monkeypatch.setattr(pw, "RETRY", pw.RETRY.new(backoff_factor=0))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SystemExit) as e:
        pw.main(["--wikitext2", "--wikitext2_url", f"http://127.0.0.1:{port}/", "--out_dir", str(tmp_path)])
    assert_one_line_error(str(e.value.code), f"could not download http://127.0.0.1:{port}/valid.txt",
                          "Connection refused", "no network?", f"into {tmp_path / 'wikitext-2'}/")


def test_no_network_is_one_line_error_naming_the_offline_way(tmp_path, monkeypatch):
    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    monkeypatch.setattr(socket, "getaddrinfo", no_dns)  # what a machine without network answers
    monkeypatch.setattr(pw, "RETRY", pw.RETRY.new(backoff_factor=0))
    for args, what in ((["--wikitext2"], "WikiText-2's valid.txt"), ([], "WikiText-103's train-00000")):
        with pytest.raises(SystemExit) as e:
            pw.main([*args, "--out_dir", str(tmp_path)])  # the default, real URLs: never reached
        assert_one_line_error(str(e.value.code), "Failed to resolve", "no network?", f"Offline, copy {what}",
                              f"into {tmp_path}", "and run again")


def test_failed_requests_are_tried_again_and_then_stop_in_one_line(wikitext2_host, tmp_path, monkeypatch):
    """HTTP 503 and 429 are tried again (urllib3's Retry in requests' HTTPAdapter), after its backoff (Retry-After
    is not waited for); a host that keeps failing stops after the last try with one line."""
    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)
    wikitext2_host.faults += [(503, "0"), (429, "7")]
    prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2")
    assert 7 not in waits and [name for name, _ in wikitext2_host.ranges] == ["valid.txt"] * 3
    assert (tmp_path / "wikitext-2" / "valid.txt").read_bytes() == wikitext(1)
    wikitext2_host.faults += [(503, "0")] * 10
    with pytest.raises(SystemExit) as e:
        prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2=test")
    assert_one_line_error(str(e.value.code), "could not download", "test.txt (too many 503 error responses)")
    assert len(wikitext2_host.ranges) == 3 + 1 + pw.RETRY.total

def test_each_wait_to_try_again_is_said_first_and_a_long_retry_after_is_not_waited(wikitext2_host, tmp_path,
                                                                                    monkeypatch, capsys):
    """A 503 with Retry-After: 3600 waited an hour (urllib3 honours it) without a line: the wait is urllib3's backoff,
    and a line says why and how long before it."""
    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)
    wikitext2_host.faults += [(503, "3600")]
    prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2")
    printed = capsys.readouterr().out
    assert waits == [0] and f"  HTTP 503; try 2 of {pw.RETRY.total + 1} in 0 s\n" in printed
    assert printed.index("downloading") < printed.index("HTTP 503")
    assert (tmp_path / "wikitext-2" / "valid.txt").read_bytes() == wikitext(1)


def test_a_host_that_never_answers_is_said_at_each_try_and_ends_in_one_line(tmp_path, monkeypatch, capsys):
    """A host that takes the connection and never answers gave no line for minutes: the download is said first,
    each read waits TIMEOUT at most, each try again is said, and the last ends in one line."""
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    monkeypatch.setattr(pw, "TIMEOUT", (5, 0.05))
    with socket.socket() as silent:  # the kernel takes each connection; nobody reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        with pytest.raises(SystemExit) as e:
            pw.main(["--wikitext2", "--wikitext2_url", url, "--out_dir", str(tmp_path)])
    assert_one_line_error(str(e.value.code), f"could not download {url}valid.txt (Read timed out", "Offline, copy")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"downloading {url}valid.txt"
    assert [line.split("; ")[0] for line in lines[1:]] == ["  Read timed out. (read timeout=0.05)"] * pw.RETRY.total


def test_a_full_disk_during_a_download_is_one_line_and_the_download_resumes(wikitext2_host, small_disk, monkeypatch):
    """A full disk as a download wrote raised OSError [Errno 28] with a traceback: one line now, the part kept, and
    the next run, with room, goes on from there."""
    body = wikitext(1) * 40  # more than the room a full tmpfs leaves in a file's last page
    wikitext2_host.files["valid.txt"] = body
    monkeypatch.setitem(pw.WIKITEXT2_FILES, "valid", ("valid.txt", "sha256", hashlib.sha256(body).hexdigest()))
    disk = small_disk("disk", 1024)
    (disk / "wikitext-2").mkdir()
    (disk / "wikitext-2" / "valid.txt.part").write_bytes(body[:64])
    fill(disk)
    with pytest.raises(SystemExit) as e:
        prepare_wikitext2(wikitext2_host, disk, "--wikitext2")
    assert_one_line_error(str(e.value.code), "could not write", "valid.txt.part", "No space left",
                          "run again to resume")
    (disk / "filler").unlink()
    prepare_wikitext2(wikitext2_host, disk, "--wikitext2")
    assert [r is not None for _, r in wikitext2_host.ranges] == [True, True]  # each went on from the part
    assert (disk / "wikitext-2" / "valid.txt").read_bytes() == body


def test_a_file_where_the_download_folder_goes_is_one_line_error(wikitext2_host, tmp_path):
    (tmp_path / "wikitext-2").write_text("mine")
    with pytest.raises(SystemExit) as e:
        prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2")
    assert_one_line_error(str(e.value.code), f"{tmp_path / 'wikitext-2'} (File exists")
    assert (tmp_path / "wikitext-2").read_text() == "mine" and wikitext2_host.ranges == []

# -----------------------------------------------------------------------------
# WikiText-103 from the hub's Parquet files


def prepare_wikitext103(host, tmp_path, train_tokens, val_tokens, *extra):
    pw.main(["--wikitext103", "--wikitext103_url", host.url, "--min_chars", "0",
             "--train_tokens", str(train_tokens), "--val_tokens", str(val_tokens), "--out_dir", str(tmp_path), *extra])
    return tmp_path / f"wikitext103_{train_tokens}-{val_tokens}"


def test_wikitext103_takes_whole_articles_until_each_split_holds_the_tokens_asked_for(wikitext103_host, tmp_path,
                                                                                      capsys):
    """Val, then train, each the fewest whole articles (in the seed's order) that reach its count, every one whole as
    in the joined text (the shards' boundary cuts one)."""
    out = prepare_wikitext103(wikitext103_host, tmp_path, 2500, 600)
    printed = capsys.readouterr().out
    assert printed.index("downloading") < printed.index("tokenized")
    assert "tokenized" in printed and "'val': 6" in printed
    meta = json.load(open(out / "meta.json"))
    _, decode, _, eot = get_tokenizer("gpt2")
    source = {a["text"] for a in split_wikitext("".join(wikitext103_host.lines), "x")}
    splits = {split: read_split(out, split, decode, eot) for split in ("train", "val")}
    assert set(splits["train"]) | set(splits["val"]) <= source and not set(splits["train"]) & set(splits["val"])
    for split, asked in (("train", 2500), ("val", 600)):
        last = len(get_tokenizer("gpt2")[0](splits[split][-1])) + 1
        assert meta[f"{split}_tokens"] >= asked > meta[f"{split}_tokens"] - last  # one article fewer falls short
    assert data.prepare_command(out.name).split()[2:5] == ["--wikitext103", "--train_tokens=2500", "--val_tokens=600"]


def test_wikitext103_cut_download_resumes_and_the_checked_files_need_no_network_again(wikitext103_host, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.setattr(pw, "CHUNK", 64)
    first = list(pw.WIKITEXT103_FILES)[0]
    wikitext103_host.cut = {first}
    with pytest.raises(SystemExit):  # cut: run again
        prepare_wikitext103(wikitext103_host, tmp_path, 1000, 300)
    out = prepare_wikitext103(wikitext103_host, tmp_path, 1000, 300)
    half = len(wikitext103_host.files[first]) // 2
    assert wikitext103_host.ranges[:2] == [(first, None), (first, f"bytes={half - half % 64}-")]
    files = {f: (out / f).read_bytes() for f in ("train.bin", "val.bin", "meta.json")}
    wikitext103_host.files.clear()  # the host has nothing now: the files already downloaded and checked are used
    assert prepare_wikitext103(wikitext103_host, tmp_path, 1000, 300) == out
    assert {f: (out / f).read_bytes() for f in files} == files and len(wikitext103_host.ranges) == 3


def test_a_file_where_a_download_goes_that_is_not_the_pinned_one_is_refused_and_never_touched(
        wikitext103_host, wikitext2_host, tmp_path):
    """A file the user put where a download goes but not the pinned one (a truncated copy, another revision, a copy
    with Windows line endings) stops the preparation with one line naming it; it is neither used, deleted nor
    overwritten. Moved away, the checked download takes its place."""
    folder, first = tmp_path / "wikitext-103", list(pw.WIKITEXT103_FILES)[0]
    folder.mkdir()
    truncated = wikitext103_host.files[first][:1000]
    (folder / first).write_bytes(truncated)
    with pytest.raises(SystemExit) as e:
        prepare_wikitext103(wikitext103_host, tmp_path, 1000, 300)
    assert_one_line_error(str(e.value.code), f"{folder / first} is not WikiText-103's {first} as published",
                          "move it away")
    assert (folder / first).read_bytes() == truncated and wikitext103_host.ranges == []
    (folder / first).rename(tmp_path / "mine.parquet")
    prepare_wikitext103(wikitext103_host, tmp_path, 1000, 300)
    assert (folder / first).read_bytes() == wikitext103_host.files[first]
    (tmp_path / "wikitext-2").mkdir()  # WikiText-2 alike: a Windows copy of valid.txt
    (tmp_path / "wikitext-2" / "valid.txt").write_bytes(wikitext(1).replace(b"\n", b"\r\n"))
    with pytest.raises(SystemExit) as e:
        prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2")
    assert_one_line_error(str(e.value.code), "is not WikiText-2's valid.txt as published")
    assert (tmp_path / "wikitext-2" / "valid.txt").read_bytes() == wikitext(1).replace(b"\n", b"\r\n")


def test_the_fix_offered_for_a_file_that_is_not_the_pinned_one_works(wikitext103_host, wikitext2_host, tmp_path):
    """It offered `--input X.parquet --name=NAME` for a wrong Parquet file, which reads it as text and is refused:
    a text file is offered as your own text, any other file is to be moved away; each fix, followed, prepares."""
    (tmp_path / "wikitext-103").mkdir()
    wrong = tmp_path / "wikitext-103" / list(pw.WIKITEXT103_FILES)[1]
    wrong.write_bytes(wikitext103_host.files[wrong.name][:-1])
    with pytest.raises(SystemExit) as e:
        prepare_wikitext103(wikitext103_host, tmp_path, 1000, 300)
    assert_one_line_error(str(e.value.code), f"{wrong} is not WikiText-103's", "move it away")
    assert "--input" not in str(e.value.code)
    wrong.rename(tmp_path / "moved.parquet")
    prepare_wikitext103(wikitext103_host, tmp_path, 1000, 300)
    (tmp_path / "wikitext-2").mkdir()
    (tmp_path / "wikitext-2" / "test.txt").write_bytes(wikitext(2).replace(b" .", b"!"))
    with pytest.raises(SystemExit) as e:
        prepare_wikitext2(wikitext2_host, tmp_path, "--wikitext2=test")
    offered = str(e.value.code).split("as text: ")[1].replace("NAME", "mine").split()
    pw.main([*offered, "--tokenizer", "byte", "--min_chars", "0", "--out_dir", str(tmp_path)])
    assert json.loads((tmp_path / "mine" / "meta.json").read_text())["train_articles"] > 0


def test_wikitext103_from_a_folder_of_local_copies_prepares_offline_what_the_download_prepares(wikitext103_host,
                                                                                                tmp_path):
    out = prepare_wikitext103(wikitext103_host, tmp_path / "online", 1000, 300)
    copies = tmp_path / "copies"
    copies.mkdir()
    for name, body in wikitext103_host.files.items():
        (copies / name).write_bytes(body)
    wikitext103_host.files.clear()  # the host has nothing now
    offline = prepare_wikitext103(wikitext103_host, tmp_path / "offline", 1000, 300, "--input", str(copies))
    assert all((offline / f).read_bytes() == (out / f).read_bytes() for f in ("train.bin", "val.bin"))
    assert len(wikitext103_host.ranges) == 2  # the online run's two downloads, nothing since


def test_wikitext103_cannot_give_more_tokens_than_its_train_split_has(wikitext103_host, tmp_path):
    with pytest.raises(SystemExit) as e:
        prepare_wikitext103(wikitext103_host, tmp_path, 10 ** 7, 600)
    assert_one_line_error(str(e.value.code), "WikiText-103's train split has 3,365 tokens", "lower --train_tokens")


@pytest.mark.parametrize("args, fragment", [(["--wikitext103", "--wikitext2"], "leave out --wikitext2"),
                                            (["--input", "x.txt", "--train_tokens", "100"],
                                             "size WikiText-103; add --wikitext103")])
def test_wikitext103_options_out_of_place_are_one_line_errors(tmp_path, args, fragment):
    with pytest.raises(SystemExit) as e:
        pw.main([*args, "--out_dir", str(tmp_path)])
    assert_one_line_error(str(e.value.code), fragment)


# -----------------------------------------------------------------------------
# local input


def read_split(out, split, decode, eot_token):
    """The article texts stored in out/<split>.bin."""
    ids = np.fromfile(out / f"{split}.bin", dtype=np.uint16)
    cuts = np.flatnonzero(ids == eot_token)
    assert len(ids) == 0 or cuts[-1] == len(ids) - 1  # every article ends with eot
    return [decode(article[:-1]) for article in np.split(ids, cuts + 1)[:-1]]


@pytest.mark.parametrize("tokenizer", ["byte", "gpt2"])
def test_input_split_is_by_article_and_meta_counts_match_bins(tmp_path, tokenizer):
    make_wikitext(tmp_path / "small.txt")
    pw.main(["--input", str(tmp_path / "small.txt"), "--tokenizer", tokenizer, "--min_chars", "0",
             "--val_fraction", "0.25", "--out_dir", str(tmp_path), "--name", "small"])
    out = tmp_path / "small"
    meta = json.load(open(out / "meta.json"))
    _, decode, vocab_size, eot_token = get_tokenizer(tokenizer)
    train, val = read_split(out, "train", decode, eot_token), read_split(out, "val", decode, eot_token)
    texts = [a["text"] for a in pw.read_input([str(tmp_path / "small.txt")])]
    assert len(val) == 3 and len(train) == 9
    assert not set(train) & set(val) and sorted(train + val) == sorted(texts)
    for split, articles in (("train", train), ("val", val)):
        assert meta[f"{split}_tokens"] == os.path.getsize(out / f"{split}.bin") // 2
        assert meta[f"{split}_articles"] == len(articles)
    assert (meta["tokenizer"], meta["vocab_size"], meta["eot_token"], meta["dtype"]) == (
        tokenizer, vocab_size, eot_token, "uint16")
    assert files_in(out) == ["meta.json", "train.bin", "val.bin"]


def test_rerun_gives_identical_files_and_seed_chooses_the_val_articles(tmp_path):
    make_wikitext(tmp_path / "small.txt")

    def prepare(name, seed):
        pw.main(["--input", str(tmp_path / "small.txt"), "--tokenizer", "byte", "--min_chars", "0",
                 "--val_fraction", "0.25", "--seed", str(seed), "--out_dir", str(tmp_path), "--name", name])
        return {f: (tmp_path / name / f).read_bytes() for f in ("train.bin", "val.bin", "meta.json")}
    assert prepare("a", 1) == prepare("b", 1)
    assert prepare("c", 2)["val.bin"] != prepare("a", 1)["val.bin"]


def test_input_folder_reads_its_txt_files_in_sorted_order(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "b.txt").write_text(" = Beta = \n Second .\n")
    (folder / "a.txt").write_text(" = Alpha = \n First .\n = Gamma = \n Third .\n")
    (folder / "notes.md").write_text("not an article")
    articles = pw.read_input([str(folder)])
    assert [a["title"] for a in articles] == ["Alpha", "Gamma", "Beta"]


@pytest.mark.parametrize("kind, phrase", [("missing.txt", "cannot read"),
                                          ("empty.txt", "no article of at least --min_chars=500 characters"),
                                          ("empty_folder", "no article of at least --min_chars=500 characters")])
def test_bad_input_is_one_line_error_naming_the_problem(tmp_path, kind, phrase):
    path = tmp_path / kind
    if kind == "empty.txt":
        path.write_text("")
    if kind == "empty_folder":
        path.mkdir()
    with pytest.raises(SystemExit) as e:
        pw.main(["--input", str(path), "--tokenizer", "byte", "--out_dir", str(tmp_path)])
    assert_one_line_error(str(e.value.code), phrase, str(path))


def test_text_that_is_not_utf8_is_refused_naming_the_file_and_byte_offset(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(" = Zürich = \n A city .\n".encode("latin-1"))
    with pytest.raises(SystemExit) as e:
        pw.main(["--input", str(path), "--tokenizer", "byte", "--min_chars", "0", "--out_dir", str(tmp_path)])
    assert_one_line_error(str(e.value.code), str(path), "not UTF-8", "byte 0xfc at byte offset 4")


def test_text_file_with_nul_is_refused_as_binary(tmp_path):
    path = tmp_path / "utf16.txt"
    path.write_bytes(" = Title = \n Text .\n".encode("utf-16-le"))
    with pytest.raises(SystemExit) as e:
        pw.main(["--input", str(path), "--tokenizer", "byte", "--min_chars", "0", "--out_dir", str(tmp_path)])
    assert_one_line_error(str(e.value.code), str(path), "NUL byte at byte offset 1")


def test_nul_in_articles_never_becomes_an_end_of_text_inside_an_article(capsys):
    """WikiText-103's Parquet rows are read as they are: a NUL there, the byte tokenizer's end of text, goes."""
    articles = [{"title": "T", "text": f"Article\x00 {i}\x00."} for i in range(4)]
    assert [a["text"] for a in without_nul(articles)] == [f"Article {i}." for i in range(4)]
    assert "removed 8 NUL characters" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["../..", "..", "a/b"])
def test_a_name_that_is_no_folder_of_data_is_one_line_error(tmp_path, name):
    (tmp_path / "t.txt").write_text(" = T = \n Text .\n")
    with pytest.raises(SystemExit) as e:
        pw.main(["--input", str(tmp_path / "t.txt"), "--name", name, "--tokenizer", "byte", "--min_chars", "0",
                 "--out_dir", str(tmp_path / "data")])
    assert_one_line_error(str(e.value.code), "is not a folder name")
    assert not (tmp_path / "data").exists()


def test_input_is_named_after_its_file_and_ends_with_the_command_that_trains_on_it(tmp_path, capsys):
    """`--input valid.txt` writes data/valid and says `python train.py --dataset=valid`, as again in place of the
    first."""
    (tmp_path / "valid.txt").write_text(" = T = \n Text one .\n\n = U = \n Text two .\n")
    args = ["--input", str(tmp_path / "valid.txt"), "--tokenizer", "byte", "--min_chars", "0", "--val_fraction",
            "0.5", "--out_dir", str(tmp_path / "data")]
    pw.main(args)
    assert sorted(os.listdir(tmp_path / "data")) == ["valid"]
    suggested = "train on it: python train.py config/cpu_encdec_mse_pos_sub.py --dataset=valid (minutes on a CPU"
    assert suggested in capsys.readouterr().out
    pw.main(args)
    assert suggested in capsys.readouterr().out


@pytest.mark.parametrize("tokenizer, compact, name, suggested", [
    ("byte", [], "wikitext2_valid_byte", "config/cpu_encdec_mse_pos_sub.py (minutes"),
    ("gpt2", ["--compact_vocab"], "wikitext2_valid_gpt2c", "config/cpu_gpt2_encdec_mse_pos_sub.py (minutes"),
    ("gpt2", [], "mine", "config/cpu_gpt2_encdec_mse_pos_sub.py --dataset=mine --vocab_size=None (minutes"),
])
def test_the_command_prepare_suggests_trains_the_cpu_sized_encoder_decoder_on_it(tmp_path, capsys, tokenizer,
                                                                                   compact, name, suggested):
    """It suggested `python train.py --dataset=...`: the write-up's 8M model at 160k tokens a step, 32 days on a
    CPU. The suggestion is a config that finishes in minutes, and its settings take the dataset prepared."""
    (tmp_path / "t.txt").write_text(word_articles(["the", "river", "castle"], 40, 300))
    pw.main(["--input", str(tmp_path / "t.txt"), "--tokenizer", tokenizer, *compact, "--min_chars", "0",
             "--name", name, "--out_dir", str(tmp_path / "data")])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.endswith(f"train on it: python train.py {suggested} on a CPU; config/ has the other variants)")
    shutil.copytree(os.path.join(ROOT, "config"), tmp_path / "config")
    command = suggested.split(" (")[0].split()  # trains on it: here, its first evaluation
    result = run("train.py", *command, "--max_iters=0", "--out_dir=out", "--device=cpu", cwd=tmp_path)
    assert "eval 0: train loss" in result.stdout


@pytest.mark.parametrize("where, phrase", [("a_file", "(Not a directory"), ("a_file/x", "(Not a directory")])
def test_an_out_dir_that_cannot_hold_the_dataset_is_one_line_error(tmp_path, where, phrase):
    (tmp_path / "a_file").write_text("")
    (tmp_path / "t.txt").write_text(" = T = \n Text .\n")
    with pytest.raises(SystemExit) as e:
        pw.main(["--input", str(tmp_path / "t.txt"), "--tokenizer", "byte", "--min_chars", "0",
                 "--out_dir", str(tmp_path / where)])
    assert_one_line_error(str(e.value.code), phrase)


def test_ctrl_c_while_preparing_local_text_is_one_line(tmp_path):
    (tmp_path / "t.txt").write_text(" = T = \n Text .\n")
    result = interrupted_at("text", "split_wikitext", "prepare_wikipedia.py", "--input", "t.txt", "--tokenizer",
                            "byte", cwd=tmp_path)
    assert_interrupted(result, "run the same command again")


def test_windows_and_old_mac_line_endings_give_the_same_dataset(tmp_path):
    """Every text read has its line endings normalised: a copy with \\r\\n or a lone \\r is the same text, token for
    token (a \\r kept in the tokens would make another dataset without a word)."""
    text = word_articles(["the", "river", "was", "built"], 8, 40).replace(" .\n", " .\n\n a second line .\n")
    for name, newline in (("lf", "\n"), ("crlf", "\r\n"), ("cr", "\r")):
        (tmp_path / f"{name}.txt").write_bytes(text.replace("\n", newline).encode())
        pw.main(["--input", str(tmp_path / f"{name}.txt"), "--tokenizer", "byte",
                 "--min_chars", "0", "--val_fraction", "0.25", "--out_dir", str(tmp_path / "data")])
    for f in ("train.bin", "val.bin"):
        lf = (tmp_path / "data" / "lf" / f).read_bytes()
        assert (tmp_path / "data" / "crlf" / f).read_bytes() == lf == (tmp_path / "data" / "cr" / f).read_bytes()
        assert ord("\r") not in np.frombuffer(lf, np.uint16)


@pytest.mark.parametrize("args", [["--name=reversal"], ["--name=Reversal"], []])
def test_a_name_the_scripts_treat_specially_is_refused(tmp_path, args):
    """data/reversal would never be read (--dataset=reversal is the generated task of tasks/reversal.py); also when
    the name comes from the file's."""
    (tmp_path / "reversal.txt").write_text(" = T = \n Text .\n")
    with pytest.raises(SystemExit) as e:
        pw.main(["--input", str(tmp_path / "reversal.txt"), *args, "--tokenizer", "byte", "--min_chars", "0",
                 "--out_dir", str(tmp_path / "data")])
    assert_one_line_error(str(e.value.code), "is reserved", "choose another --name")
    assert not (tmp_path / "data").exists()


def test_input_folder_skips_subfolders_and_broken_links_named_like_text_files(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.TXT").write_text(" = Alpha = \n First .\n")  # a suffix read without regard to case
    (folder / "x.txt").mkdir()
    (folder / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    assert [a["title"] for a in pw.read_input([str(folder)])] == ["Alpha"]
    with pytest.raises(SystemExit) as e:
        pw.read_input([str(folder / "gone.txt")])
    assert_one_line_error(str(e.value.code), "cannot read", str(folder / "gone.txt"))


def test_a_second_prepare_of_the_same_dataset_stops_naming_the_first_and_leaves_its_files_alone(tmp_path):
    """The first prepare stops right after writing train.bin's temporary file (told through a pipe when it is there,
    and when to go on); a second one of the same data folder meanwhile stops with one line naming it, and the first
    finishes."""
    (tmp_path / "t.txt").write_text(word_articles(["the", "river", "was"], 6, 30))
    args = ["--input", str(tmp_path / "t.txt"), "--tokenizer", "byte", "--min_chars", "0", "--name", "same"]
    code = ("import os, runpy, sys\nreal = os.replace\n"
            "def replace(src, dst):\n"
            "    if src.endswith('train.bin.new.partial'):\n"
            "        print('written', flush=True)\n        sys.stdin.readline()\n"
            "    real(src, dst)\n"
            f"os.replace = replace\nsys.argv = ['prepare_wikipedia.py', *{args!r}]\n"
            f"runpy.run_path({os.path.join(ROOT, 'prepare_wikipedia.py')!r}, run_name='__main__')\n")
    first = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=ENV, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while first.stdout.readline() not in ("written\n", ""):  # its progress lines come first
        pass
    assert first.poll() is None, first.communicate()
    with pytest.raises(SystemExit) as second:
        pw.main([*args, "--out_dir", str(tmp_path / "data")])
    assert_one_line_error(str(second.value.code), f"{tmp_path / 'data' / 'same'} is in use by pid {first.pid} "
                          f"(prepare_wikipedia.py --input", "wait for it to finish")
    assert (tmp_path / "data" / "same" / "train.bin.new.partial").exists()
    out, err = first.communicate("\n", timeout=60)
    assert first.returncode == 0, err
    meta = json.loads((tmp_path / "data" / "same" / "meta.json").read_text())
    assert meta["train_tokens"] == os.path.getsize(tmp_path / "data" / "same" / "train.bin") // 2


def test_a_dataset_a_run_trains_on_is_not_prepared_again_under_it(workdir, tmp_path):
    """While train.py trains on data/tiny, preparing data/tiny again (which would change its text under the run, or
    end it with an IndexError) stops with one line naming the run; once the run has ended, it prepares."""
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    before = {name: (tmp_path / "data" / "tiny" / name).read_bytes() for name in ("train.bin", "val.bin", "meta.json")}
    args = ["--input", str(workdir / "text.txt"), "--name", "tiny", "--tokenizer", "byte", "--val_fraction", "0.2"]
    first = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *TINY, "--out_dir=out",
                              "--max_iters=1000000", "--eval_interval=1000"], cwd=tmp_path,
                             env={**ENV, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, text=True)
    try:
        for line in first.stdout:  # it trains
            if line.startswith("iter "):
                break
        assert_one_line_error(run("prepare_wikipedia.py", *args, cwd=tmp_path, check=False),
                              f"data{os.sep}tiny is in use by pid {first.pid} (train.py --dataset=tiny",
                              "wait for it to finish")
        assert {name: (tmp_path / "data" / "tiny" / name).read_bytes() for name in before} == before
    finally:
        first.kill()
        first.wait()
    run("prepare_wikipedia.py", *args, cwd=tmp_path)
    assert (tmp_path / "data" / "tiny" / "train.bin").read_bytes() != before["train.bin"]


def test_a_run_does_not_start_on_a_dataset_being_prepared(workdir, tmp_path):
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    with holding(os.path.join("data", "tiny"), "prepare_wikipedia.py --name=tiny", tmp_path) as holder:
        result = run("train.py", *TINY, "--out_dir=out", "--max_iters=2", cwd=tmp_path, check=False)
        assert_one_line_error(result, f"data{os.sep}tiny is in use by pid {holder.pid} (prepare_wikipedia.py "
                              "--name=tiny", "wait for it to finish")
        assert not (tmp_path / "out").exists()


def test_a_refused_preparation_writes_no_file_and_removes_no_folder(tmp_path):
    """The folders it made stay, empty; nothing it did not make is touched, even through '..'."""
    (tmp_path / "short.txt").write_text("too short\n")
    (tmp_path / "data" / "short").mkdir(parents=True)
    (tmp_path / "data" / "short" / "yours.txt").write_text("kept")
    for out_dir in ("data", "made/../data", "a/b/../c"):
        result = run("prepare_wikipedia.py", "--input", "short.txt", "--name", "short", "--tokenizer", "byte",
                     f"--out_dir={out_dir}", cwd=tmp_path, check=False)
        assert_one_line_error(result, "no article of at least --min_chars=500 characters")
    assert sorted(os.listdir(tmp_path)) == ["a", "data", "made", "short.txt"]
    assert os.listdir(tmp_path / "data") == ["short"] and os.listdir(tmp_path / "data" / "short") == ["yours.txt"]
    assert os.listdir(tmp_path / "a" / "c" / "short") == [] and os.listdir(tmp_path / "made") == []


def test_no_flags_prepare_wikitext103_as_the_write_up_names_it(wikitext103_host, tmp_path, capsys):
    """What `python prepare_wikipedia.py` prepares is what train.py trains on by default (data/wikitext103, the
    write-up's token counts); --wikitext103 says the same explicitly."""
    args = pw.parse_args([])
    assert args.wikitext103 and (args.train_tokens, args.val_tokens) == (38_276_830, 4_341_780)
    assert pw.dataset_name(args) == pw.TRAIN_DEFAULT == "wikitext103"
    implicit = ["--wikitext103_url", wikitext103_host.url, "--min_chars", "0", "--train_tokens", "1000",
                "--val_tokens", "300", "--name", "wikitext103"]
    pw.main([*implicit, "--out_dir", str(tmp_path / "implicit")])
    assert capsys.readouterr().out.strip().endswith("train on it: python train.py (the write-up's run: 9,000 "
                                                    "steps, for a GPU)")
    explicit = prepare_wikitext103(wikitext103_host, tmp_path / "explicit", 1000, 300)
    for f in ("train.bin", "val.bin"):
        assert (tmp_path / "implicit" / "wikitext103" / f).read_bytes() == (explicit / f).read_bytes()

# -----------------------------------------------------------------------------
# a preparation is all or nothing: the old dataset stays whole and usable until the new one is


def dataset_files(folder):
    """The dataset's three files, byte for byte; no new file of a preparation left beside them."""
    assert not [name for name in os.listdir(folder) if name.endswith((".new", ".partial"))], os.listdir(folder)
    return {name: (folder / name).read_bytes() for name in ("train.bin", "val.bin", "meta.json")}


def prepare_text(path, out_dir, *extra):
    pw.main(["--input", str(path), "--name", "text", "--tokenizer", "byte", "--min_chars", "0", "--val_fraction",
             "0.5", "--out_dir", str(out_dir), *extra])


def usable(root, monkeypatch):
    """Whether train.py would take root/data/text as whole (its start-up check, data.check_dataset)."""
    monkeypatch.chdir(root)
    try:
        return data.check_dataset("text", 8, None)["tokenizer"] == "byte"
    except SystemExit:
        return False


def test_a_full_disk_at_the_second_file_keeps_the_old_dataset_whole_and_says_so(small_disk, tmp_path, monkeypatch):
    disk = small_disk("disk", 1024)
    (tmp_path / "old.txt").write_text(word_articles(["the", "river"], 8, 30))
    (tmp_path / "new.txt").write_text(word_articles(["the", "river", "castle", "walls"], 40, 150))
    prepare_text(tmp_path / "new.txt", tmp_path / "elsewhere")  # the sizes of the new files
    sizes = {f: os.path.getsize(tmp_path / "elsewhere" / "text" / f) for f in ("train.bin", "val.bin")}
    assert sizes["val.bin"] > 24_000
    prepare_text(tmp_path / "old.txt", disk / "data")
    before = dataset_files(disk / "data" / "text")
    fill(disk, leave=sizes["train.bin"] + 12_000)  # room for the new train.bin, not for val.bin beside it
    with pytest.raises(SystemExit) as e:
        prepare_text(tmp_path / "new.txt", disk / "data")
    assert_one_line_error(str(e.value.code), "val.bin", "No space left", "free some space",
                          f"{disk / 'data' / 'text'} keeps its old dataset")
    assert dataset_files(disk / "data" / "text") == before and usable(disk, monkeypatch)


def test_an_interruption_between_the_files_keeps_the_old_dataset_whole(tmp_path, monkeypatch, ctrl_c_works):
    (tmp_path / "old.txt").write_text(word_articles(["the", "river"], 8, 30))
    (tmp_path / "new.txt").write_text(word_articles(["the", "river", "castle"], 12, 60))
    prepare_text(tmp_path / "old.txt", tmp_path / "data")
    before = dataset_files(tmp_path / "data" / "text")
    real = pw.write_atomic

    def ctrl_c_at_val_bin(path, data, *args):  # the second file, train.bin's written
        if os.path.basename(path).startswith("val.bin"):
            raise KeyboardInterrupt
        real(path, data, *args)
    monkeypatch.setattr(pw, "write_atomic", ctrl_c_at_val_bin)
    with pytest.raises(KeyboardInterrupt):
        prepare_text(tmp_path / "new.txt", tmp_path / "data")
    assert dataset_files(tmp_path / "data" / "text") == before and usable(tmp_path, monkeypatch)


def test_an_interruption_just_after_the_last_file_puts_the_new_dataset_in_place_and_says_so(tmp_path, monkeypatch):
    """A stop after meta.json.new is whole, before the renames hold stops off: the new dataset goes in place, and
    the line a stop prints says so (it said the old one stayed)."""
    (tmp_path / "new.txt").write_text(word_articles(["the", "river", "castle"], 12, 60))
    prepare_text(tmp_path / "new.txt", tmp_path / "clean")
    prepare_text(tmp_path / "new.txt", tmp_path / "data", "--seed", "1")
    real = pw.write_atomic

    def ctrl_c_after_meta_json(path, data, *args):
        real(path, data, *args)
        if os.path.basename(path) == "meta.json.new":
            raise KeyboardInterrupt
    monkeypatch.setattr(pw, "write_atomic", ctrl_c_after_meta_json)
    monkeypatch.setattr(pw, "stopped", pw.stopped)
    with pytest.raises(KeyboardInterrupt):
        prepare_text(tmp_path / "new.txt", tmp_path / "data")
    assert dataset_files(tmp_path / "data" / "text") == dataset_files(tmp_path / "clean" / "text")
    assert pw.stopped == f"the new dataset in {tmp_path / 'data' / 'text'} is whole and in place"


# the arguments that prepare new.txt over old.txt's dataset, data/text
RENAMED = ["--input", "new.txt", "--name", "text", "--tokenizer", "byte", "--min_chars", "0", "--val_fraction", "0.5"]


def prepare_with_an_event_at_the_first_rename(tmp_path, event):
    """data/text prepared from old.txt, clean/text from new.txt; then the code that prepares new.txt over data/text
    with `event` (a line of Python) run as soon as train.bin is renamed over the old one."""
    (tmp_path / "old.txt").write_text(word_articles(["the", "river"], 8, 30))
    (tmp_path / "new.txt").write_text(word_articles(["the", "river", "castle"], 12, 60))
    prepare_text(tmp_path / "old.txt", tmp_path / "data")
    prepare_text(tmp_path / "new.txt", tmp_path / "clean")
    return ("import os, runpy, signal, sys\nreal = os.replace\n"
            "def replace(src, dst):\n"
            "    real(src, dst)\n"
            "    if src.endswith('train.bin.new'):\n"
            f"        {event}\n"
            f"os.replace = replace\nsys.argv = ['prepare_wikipedia.py', *{RENAMED!r}]\n"
            f"runpy.run_path({os.path.join(ROOT, 'prepare_wikipedia.py')!r}, run_name='__main__')\n")


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_stop_while_the_files_are_renamed_waits_till_the_new_dataset_is_whole_and_says_so(tmp_path, monkeypatch,
                                                                                           stop):
    """A stop that came between the renames left new train.bin and val.bin beside the old meta.json, said the dataset
    "stays whole", and train.py refused it: the stop now waits for the last rename, and the line says which."""
    code = prepare_with_an_event_at_the_first_rename(tmp_path, f"os.kill(os.getpid(), signal.{stop})")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                            preexec_fn=stops_at_their_defaults())
    assert result.returncode == 130
    assert_interrupted(result, f"the new dataset in data{os.sep}text is whole and in place")
    finished, clean = dataset_files(tmp_path / "data" / "text"), dataset_files(tmp_path / "clean" / "text")
    assert {f: finished[f] for f in ("train.bin", "val.bin")} == {f: clean[f] for f in ("train.bin", "val.bin")}
    assert usable(tmp_path, monkeypatch)


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_stop_as_python_shuts_down_after_prepare_wrote_ends_quietly_with_status_0(tmp_path, monkeypatch, stop):
    """A stop that came after `wrote ...`, as the interpreter ran its exit functions, printed a KeyboardInterrupt
    traceback (and exit status 0): the dataset is whole and the preparation done, so it changes nothing now."""
    (tmp_path / "new.txt").write_text(word_articles(["the", "river", "castle"], 12, 60))
    code = ("import atexit, os, runpy, signal, sys\n"  # registered first: the last exit function to run
            f"atexit.register(lambda: os.kill(os.getpid(), signal.{stop}))\n"
            f"sys.argv = ['prepare_wikipedia.py', *{RENAMED!r}]\n"
            f"runpy.run_path({os.path.join(ROOT, 'prepare_wikipedia.py')!r}, run_name='__main__')\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                            preexec_fn=stops_at_their_defaults())
    assert (result.returncode, result.stderr) == (0, "") and "wrote data" in result.stdout
    assert usable(tmp_path, monkeypatch)


def test_a_kill_between_the_renames_is_refused_by_train_py_and_finished_by_the_next_preparation(tmp_path,
                                                                                               monkeypatch):
    """Killed (kill -9) after train.bin is renamed over the old one: train.py refuses the mixed folder, and the next
    preparation of that name, even one that then fails, first finishes the new dataset, which was whole."""
    code = prepare_with_an_event_at_the_first_rename(tmp_path, "os._exit(9)")
    assert subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV).returncode == 9
    assert not usable(tmp_path, monkeypatch)  # a mix of two preparations is never taken for a dataset
    result = run("prepare_wikipedia.py", *RENAMED, "--min_chars", "1000000", cwd=tmp_path, check=False)
    assert_one_line_error(result, "no article of at least --min_chars=1000000")
    assert f"data{os.sep}text: a killed preparation's renames are done" in result.stdout
    finished, clean = dataset_files(tmp_path / "data" / "text"), dataset_files(tmp_path / "clean" / "text")
    assert {f: finished[f] for f in ("train.bin", "val.bin")} == {f: clean[f] for f in ("train.bin", "val.bin")}
    assert json.loads(finished["meta.json"])["source"] == "local files: new.txt" and usable(tmp_path, monkeypatch)
