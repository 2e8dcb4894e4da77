"""Files written whole, and folders held by one writer or shared by readers."""
import atexit
import os
import time
from contextlib import suppress
from pathlib import Path

import filelock

from machinery.process import fail

_held = {}  # the folders this process holds (real paths) and their locks


def write_error(path, error):  # the OS's reason, and what to do
    folder = os.path.dirname(os.path.abspath(path))
    fixes = "free some space or make it writable, or write elsewhere"
    return f"{error.strerror or error} in {folder}: {fixes}"


def write_atomic(path, data, kept=""):  # data: bytes, or a function of a file
    partial = f"{path}.partial"  # the next write reuses it
    try:
        with open(partial, "wb") as f:
            data(f) if callable(data) else f.write(data)
        os.replace(partial, path)
    except BaseException as e:  # also Ctrl-C: path stays as it was
        with suppress(OSError):
            os.remove(partial)
        if not isinstance(e, OSError):
            raise
        fail(f"could not write {path}: {write_error(path, e)}{kept}")


def make_folder(folder, what="--out_dir"):  # no folder is ever removed
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)  # an error names the part in the way
    except OSError as e:
        fail(f"cannot make {what}={folder} ({e.strerror}: {e.filename}); choose another {what}")


def hold_folder(folder, what, command, shared=False):
    """Hold folder till this process ends, alone or beside other readers (shared)."""
    held = _held.get(os.path.realpath(folder))
    if held is not None and not shared and not held.lock_file.endswith(".held"):
        fail(f"{folder} holds the data this run reads; use another {what}")
    if held is not None:  # held already, as asked or more
        return
    # a writer's lock: .held, a reader's: .held.<pid>; the note: .lock(.<pid>)
    mine = os.path.join(folder, f".held.{os.getpid()}" if shared else ".held")
    others = [os.path.join(folder, ".held")] if shared else Path(folder).glob(".held.[0-9]*")
    lock = filelock.FileLock(mine, timeout=0)
    try:
        lock.acquire()
        for path in others:  # a reader waits out another's look at .held
            other = filelock.FileLock(str(path), timeout=5 * shared)
            other.acquire()
            let_go(other)  # held by no one: the lock of a process that ended goes
    except OSError as e:  # filelock.Timeout too: another process holds it
        let_go(lock)
        if not isinstance(e, filelock.Timeout):
            fail(f"{folder} cannot be locked ({e.strerror}: {e.filename}); make it writable, "
                 f"remove what is in the way, or use another {what} on a file system with locks")
        who = "another process"
        with suppress(OSError), open(note_of(e.lock_file), encoding="utf-8") as f:
            who = f.read().strip() or who
        fail(f"{folder} is in use by {who}; wait for it to finish, or use another {what}")
    _held[os.path.realpath(folder)] = lock
    atexit.register(let_go, lock)
    note = f"pid {os.getpid()} ({command}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n"
    with suppress(OSError):  # a full disk: no note, the lock holds all the same
        Path(note_of(mine)).unlink(missing_ok=True)  # a link goes, not its file
        Path(note_of(mine)).write_text(note, "utf-8", "backslashreplace")


def note_of(lock_file):  # the note saying who holds a lock: .held.12 -> .lock.12
    folder, name = os.path.split(lock_file)
    return os.path.join(folder, ".lock" + name[len(".held"):])


def let_go(lock):  # release a lock, and remove its file and note
    if lock.is_locked:  # not let go of already (release_folder)
        lock.release()
        with suppress(OSError):  # e.g. a folder in the way: it stays
            Path(lock.lock_file).unlink(missing_ok=True)
            Path(note_of(lock.lock_file)).unlink(missing_ok=True)


def release_folder(folder):  # for a caller going on after its work there
    lock = _held.pop(os.path.realpath(folder), None)
    if lock is not None:
        let_go(lock)
