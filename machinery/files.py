"""
Files written whole, and folders held by one process: a crash, a full disk or a second process
never leaves a half-written checkpoint, log or dataset behind.
"""
import atexit
import errno
import glob
import os
import re
import shutil
import time
import warnings

with warnings.catch_warnings():  # without fcntl: "only soft file lock", which hold_folder says
    warnings.simplefilter("ignore")
    import filelock  # locks a folder on POSIX and Windows (torch installs it)

from machinery.process import fail


def temporary_path(path):  # where write_atomic writes first: a name no one else's file has
    return f"{path}.{os.getpid()}.partial"


def write_atomic(path, data, on_error=None):
    """Write data (bytes, or a function of the open file) into a temporary file, then rename it over
    path: a crash or a full disk leaves the previous file whole. A failed write calls
    on_error(path, error, size), or stops with one line."""
    size = None if callable(data) else len(data)
    tmp = temporary_path(path)
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
    """Why a write failed, and what to do: a full disk says the room there is and was needed."""
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
    """Remove the temporary files of writes killed in folder; any other file (notes.tmp) stays."""
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        path = os.path.join(folder, name)
        if re.fullmatch(r".+\.\d+\.partial", name) and os.path.isfile(path):
            os.remove(path)
            print(f"removed {path}, left by an interrupted write")


def folder_chain(folder):
    """folder and the folders it lies in, outermost first: a/b/c -> a, a/b, a/b/c."""
    chain = []
    path = os.path.normpath(folder)
    # dirname stops at "" (a relative path) or at the root, its own dirname
    while path and path not in chain:
        chain.append(path)
        path = os.path.dirname(path)
    return chain[::-1]


def make_folder(folder, what="--out_dir"):
    """Create folder (and its parents) for writing, or stop with one line saying why it cannot be.
    Returns the outermost folder it created, or None."""
    try:
        folder.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 arrive from the command line so
        fail(f"{what}={folder!r} is not a UTF-8 name; choose a name of UTF-8 text, e.g. letters, "
             f"digits, '_' and '-'")
    for path in folder_chain(folder):
        if os.path.islink(path) and not os.path.exists(path):
            fail(f"{what}={folder}: {path} is a broken link, to {os.readlink(path)}, which does "
                 f"not exist; create that folder, or choose another {what}")
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
    """Remove folder and those around it up to `created` (make_folder's answer), each if empty."""
    chain = folder_chain(folder)
    for path in reversed(chain[chain.index(created):] if created else []):
        try:
            os.rmdir(path)
        except OSError:  # not empty
            return


def hold_folder(folder, what, shared=False):
    """Hold folder for this process alone: filelock's lock on folder/.held, which ends with the
    process, even by kill -9; a second process stops with one line saying who holds it (the note of
    note_holder). shared: readers (runs on a dataset) each hold folder/.held.<pid>, and stop one
    that would hold it alone. Without locks, a reader goes on, and a holder with a warning."""
    if os.path.realpath(folder) in _held:
        return
    taken = []
    try:
        if filelock.FileLock is filelock.SoftFileLock:  # a lock file a kill -9 leaves behind
            raise OSError(errno.ENOLCK, "this system has no fcntl locks")
        # shared: a writer holding it already; alone: the readers holding it already
        others = glob.glob(os.path.join(glob.escape(folder), ".held.*"))
        others = [os.path.join(folder, ".held")] if shared else others
        for path in [os.path.join(folder, f".held.{os.getpid()}" if shared else ".held"), *others]:
            # a reader waits out the moment another reader looks at the writer's lock
            taken.append(take(path, timeout=5 if shared and path in others else 0))
    except filelock.Timeout:  # before OSError: it is one
        for lock in taken:
            let_go(lock)
        fail(f"{folder} is in use by {holders(folder)}; wait for it to finish, or use another "
             f"{what}")
    except (OSError, NotImplementedError) as e:
        reason = getattr(e, "strerror", None) or type(e).__name__
        if reason != "this system has no fcntl locks":
            reason += ": its file system has no locks, e.g. NFS without lockd"
        return None if shared else cannot_lock(folder, what, reason)
    for other in taken[1:]:  # a writer's lock just tried, or a reader's of a process that ended
        let_go(other)
    _held[os.path.realpath(folder)] = taken[0]
    atexit.register(let_go, taken[0])


def take(path, timeout=0):
    """The lock of path, within timeout seconds (filelock.Timeout where another holds it)."""
    lock = filelock.FileLock(path, timeout=timeout)
    lock.acquire()
    return lock


def let_go(lock):  # release a lock, and remove its file
    if not lock.is_locked:  # let go of already (release_folder)
        return
    lock.release()
    if os.path.exists(lock.lock_file):
        os.remove(lock.lock_file)


def holders(folder):
    """Who holds folder, from its notes (note_holder): 'pid 12 (train.py ..., since ...)'."""
    notes = []
    for name in sorted(os.listdir(folder)):
        if re.fullmatch(r"\.lock(\.\d+)?", name):
            try:
                with open(os.path.join(folder, name)) as f:
                    notes.append(f.read().strip())
            except OSError:
                continue
    return " and ".join(notes) or "another process"


def cannot_lock(folder, what, reason):
    """hold_folder's one line where it cannot hold folder: the run goes on, unguarded."""
    print(f"warning: {folder} cannot be locked ({reason}), so nothing stops a second process from "
          f"writing there at the same time: run one at a time in this {what}", flush=True)


def note_holder(folder, command, shared=False):
    """Write who holds folder into folder/.lock (shared: .lock.<pid>), for a second process's
    message; removed when this process exits."""
    path = os.path.join(folder, f".lock.{os.getpid()}" if shared else ".lock")
    try:
        with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:  # any command line
            f.write(f"pid {os.getpid()} ({command}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n")
    except OSError:  # a full disk, a read-only dataset: the lock holds all the same
        pass
    atexit.register(lambda: os.path.exists(path) and os.remove(path))


_held = {}  # the folders this process holds (real paths) and their locks


def release_folder(folder):
    """Let go of a folder this process holds alone, and of its note: for a caller that goes on after
    its work there (prepare_wikipedia.main called from Python, then a run that trains on it)."""
    lock = _held.pop(os.path.realpath(folder), None)
    if lock is not None:
        let_go(lock)
    if os.path.exists(os.path.join(folder, ".lock")):
        os.remove(os.path.join(folder, ".lock"))


def claim_folder(folder, command, held_as="--out_dir", hold=True):
    """Make the folder a run or a preparation writes in (none is left empty), hold it (hold=False:
    held already), note who holds it (command), remove the temporary files of killed writes."""
    created = make_folder(folder)
    atexit.register(remove_empty_folders, folder, created)
    if hold:
        hold_folder(folder, held_as)
    note_holder(folder, command)
    remove_stale_temporaries(folder)
