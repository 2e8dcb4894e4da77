"""Files written whole, and folders held by one process: no half-written file is left behind."""
import atexit
import os
import re
import tempfile
import time
import warnings
from contextlib import suppress
from pathlib import Path, PurePath

with warnings.catch_warnings():  # without fcntl: "only soft file lock", which hold_folder says
    warnings.simplefilter("ignore")
    import filelock  # locks a folder on POSIX and Windows (torch installs it)
_held = {}  # the folders this process holds (real paths) and their locks


def temporary_path(path):  # where write_atomic writes first: a name no one else's file has
    return f"{path}.{os.getpid()}.partial"


def write_atomic(path, data, on_error=None):
    """Write data (bytes, or a function of a file) whole, or call on_error(path, error, size)."""
    try:
        with open(temporary_path(path), "wb") as f:
            data(f) if callable(data) else f.write(data)
        os.replace(temporary_path(path), path)
    except BaseException as e:  # also Ctrl-C
        from machinery.file_errors import write_failed
        write_failed(path, e, data, on_error)


def folder_chain(folder):  # folder and the folders it lies in, outermost first: a, a/b, a/b/c
    path = os.path.normpath(folder)
    return [p for p in map(str, reversed(PurePath(path).parents)) if p != "."] + [path]


def make_folder(folder, what="--out_dir"):  # or one line why not; the outermost folder it made
    created = next((path for path in folder_chain(folder) if not os.path.lexists(path)), None)
    try:
        folder.encode("utf-8")  # bytes that are not UTF-8 arrive from the command line so
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()  # a file can be written there
    except (OSError, UnicodeEncodeError) as e:
        from machinery.file_errors import cannot_make
        cannot_make(folder, what, e)
    return created


def remove_empty_folders(folder, created):  # up to `created` (make_folder's answer), if empty
    chain = folder_chain(folder)
    for path in reversed(chain[chain.index(created):] if created else []):
        with suppress(OSError):  # not empty
            os.rmdir(path)


def hold_folder(folder, what, command, shared=False):
    """Hold folder till this process ends, alone or (shared) as a reader, noting who holds it (the
    command) in .lock (.lock.<pid>) where it can; or stop in one line."""
    if os.path.realpath(folder) in _held:
        return
    held = os.path.join(folder, ".held")  # a filelock: the writer's; each reader's: .held.<pid>
    others = [held] if shared else [str(path) for path in Path(folder).glob(".held.*")]
    lock = filelock.FileLock(f"{held}.{os.getpid()}" if shared else held, timeout=0)
    try:
        if filelock.FileLock is filelock.SoftFileLock:  # its lock files outlive a kill -9
            raise NotImplementedError("this system has no fcntl locks")
        lock.acquire()
        for other in [filelock.FileLock(path, timeout=5 * shared) for path in others]:
            other.acquire()  # held by no one (a reader waits out another's look at the writer's)
            let_go(other)  # and a reader's lock file of a process that ended is removed
    except (OSError, NotImplementedError) as e:  # filelock.Timeout too: another holds it
        from machinery.file_errors import cannot_hold
        return cannot_hold(folder, what, shared, lock, e)
    _held[os.path.realpath(folder)] = lock
    atexit.register(let_go, lock)
    note = os.path.join(folder, f".lock.{os.getpid()}" if shared else ".lock")
    with suppress(OSError), open(note, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(f"pid {os.getpid()} ({command}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n")
    atexit.register(Path(note).unlink, missing_ok=True)


def let_go(lock):  # release a lock, and remove its file
    if lock.is_locked:  # not let go of already (release_folder)
        lock.release()
        Path(lock.lock_file).unlink(missing_ok=True)


def claim_folder(folder, command, held_as="--out_dir"):  # make and hold it (held already: as is)
    atexit.register(remove_empty_folders, folder, make_folder(folder))  # none is left empty
    hold_folder(folder, held_as, command)
    for name in sorted(os.listdir(folder)):  # the temporary files of killed writes; notes.tmp stays
        if re.fullmatch(r".+\.\d+\.partial", name) and os.path.isfile(os.path.join(folder, name)):
            os.remove(os.path.join(folder, name))
            print(f"removed {os.path.join(folder, name)}, left by an interrupted write")


def release_folder(folder):
    """Let go of a folder this process holds alone, and of its note: for a caller that goes on after
    its work there (prepare_wikipedia.main called from Python, then a run that trains on it)."""
    lock = _held.pop(os.path.realpath(folder), None)
    if lock is not None:
        let_go(lock)
    if os.path.exists(os.path.join(folder, ".lock")):
        os.remove(os.path.join(folder, ".lock"))
