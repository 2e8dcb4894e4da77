"""Files written whole, and folders held by one process: no half-written file is ever
read, and no two processes write in one folder."""
import atexit
import errno
import os
import re
import shutil
import tempfile
import time
import warnings
from contextlib import suppress
from pathlib import Path, PurePath

from machinery.process import fail

with warnings.catch_warnings():  # without fcntl: "only soft file lock", a lock still
    warnings.simplefilter("ignore")
    import filelock  # locks a folder on POSIX and Windows (torch installs it)
_held = {}  # the folders this process holds (real paths) and their locks


def temporary_path(path):  # where write_atomic writes first: a name only it uses
    return f"{path}.{os.getpid()}.partial"


def write_error(path, error, size=None):
    """Why a write failed, and what to do: a full disk says the room it has and needed."""
    folder = os.path.dirname(os.path.abspath(path))
    if error.errno == errno.ENOSPC:
        free = shutil.disk_usage(folder).free if os.path.isdir(folder) else 0
        need = f"; the file needs {size / 1e6:.1f} MB" if size else ""
        return (f"the disk holding {folder} is full ({free / 1e6:.1f} MB free{need}): "
                "free some space there, or write elsewhere")
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{folder} is not writable ({error.strerror}): make it writable, or write elsewhere"
    return f"{error.strerror or error}; check {folder}"


def write_atomic(path, data, kept=""):
    """Write data (bytes, or a function of a file) whole, replacing path in one rename, or
    stop in one line (kept: what is kept, how to go on); a stop leaves path as it was."""
    try:
        with open(temporary_path(path), "wb") as f:
            data(f) if callable(data) else f.write(data)
        os.replace(temporary_path(path), path)
    except BaseException as e:  # also Ctrl-C: the temporary file goes
        with suppress(OSError):
            os.remove(temporary_path(path))
        if not isinstance(e, OSError):
            raise
        size = None if callable(data) else len(data)
        fail(f"could not write {path}: {write_error(path, e, size)}{kept}")


def folder_chain(folder):  # folder and those it lies in, outermost first: a, a/b, a/b/c
    path = os.path.normpath(folder)
    return [p for p in map(str, reversed(PurePath(path).parents)) if p != "."] + [path]


def make_folder(folder, what="--out_dir"):
    """Make folder, or stop in one line saying why not; return the outermost one made."""
    made = next((path for path in folder_chain(folder) if not os.path.lexists(path)), None)
    try:
        folder.encode("utf-8")  # bytes that are not UTF-8 arrive from the command line so
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()  # a file can be written there
    except UnicodeEncodeError:
        fail(f"{what}={folder!r} is not a UTF-8 name; choose one of letters, digits, '_' and '-'")
    except OSError as e:
        broken = [p for p in folder_chain(folder) if os.path.islink(p) and not os.path.exists(p)]
        if broken:
            fail(f"{what}={folder}: {broken[0]} is a broken link, to {os.readlink(broken[0])}, "
                 f"which does not exist; create that folder, or choose another {what}")
        if isinstance(e, (FileExistsError, NotADirectoryError)):
            where = "is a file" if isinstance(e, FileExistsError) else "lies under a file"
            fail(f"{what}={folder} {where}, not a folder; choose another {what}")
        fail(f"cannot write in {what}={folder}: {write_error(os.path.join(folder, 'x'), e)}")
    return made


def hold_folder(folder, what, command, shared=False):
    """Hold folder till this process ends, alone or (shared) beside readers, or stop in
    one line: held by another process (named by the note by its lock), or not lockable."""
    if os.path.realpath(folder) in _held:
        return
    # the writer's lock: .held; a reader's: .held.<pid>; beside each, .lock(.<pid>): whose
    mine = os.path.join(folder, f".held.{os.getpid()}" if shared else ".held")
    others = [os.path.join(folder, ".held")] if shared else sorted(
        str(path) for path in Path(folder).glob(".held.*"))
    lock = filelock.FileLock(mine, timeout=0)
    try:
        lock.acquire()
        for path in others:  # a reader waits out another's look at the writer's lock
            other = filelock.FileLock(path, timeout=5 * shared)
            other.acquire()
            let_go(other)  # held by no one: a lock file of a process that ended goes
    except filelock.Timeout as e:  # before OSError, which it is
        let_go(lock)
        holder = "another process"
        with suppress(OSError), open(note_of(e.lock_file), encoding="utf-8") as f:
            holder = f.read().strip() or holder
        fail(f"{folder} is in use by {holder}; wait for it to finish, or use another {what}")
    except OSError as e:
        let_go(lock)
        fail(f"{folder} cannot be locked ({e.strerror or type(e).__name__}: "
             f"{e.filename}), so nothing would keep a second process out; remove what is "
             f"in the way, or use another {what} on a file system with locks")
    _held[os.path.realpath(folder)] = lock
    atexit.register(let_go, lock)
    Path(note_of(mine)).unlink(missing_ok=True)  # a link there goes, not its file
    with suppress(OSError), open(note_of(mine), "x", encoding="utf-8",
                                 errors="backslashreplace") as f:
        f.write(f"pid {os.getpid()} ({command}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n")


def note_of(lock_file):  # the note saying who holds a lock: .held.12 -> .lock.12
    folder, name = os.path.split(lock_file)
    return os.path.join(folder, ".lock" + name[len(".held"):])


def let_go(lock):  # release a lock, and remove its file and note
    if lock.is_locked:  # not let go of already (release_folder)
        lock.release()
        Path(note_of(lock.lock_file)).unlink(missing_ok=True)
        Path(lock.lock_file).unlink(missing_ok=True)


def remove_empty_folders(folder, made):  # up to `made` (make_folder's), where empty
    chain = folder_chain(folder)
    for path in reversed(chain[chain.index(made):] if made else []):
        with suppress(OSError):  # not empty
            os.rmdir(path)


def claim_folder(folder, command, what="--out_dir"):
    """Make and hold folder, and remove the temporary files of writes killed there before
    (of the files the scripts write, never a file of yours)."""
    atexit.register(remove_empty_folders, folder, make_folder(folder, what))  # none left
    hold_folder(folder, what, command)
    ours = r"(ckpt\.pt|log\.jsonl|train\.bin|val\.bin|meta\.json)(\.new)?(\.\d+\.partial)+"
    for name in sorted(os.listdir(folder)):
        if re.fullmatch(ours, name) and os.path.isfile(os.path.join(folder, name)):
            os.remove(os.path.join(folder, name))
            print(f"removed {os.path.join(folder, name)}, left by an interrupted write")


def release_folder(folder):
    """Let go of a folder this process holds, for a caller going on after its work there
    (prepare_wikipedia.main or evaluate.main called from Python, then other work)."""
    lock = _held.pop(os.path.realpath(folder), None)
    if lock is not None:
        let_go(lock)
