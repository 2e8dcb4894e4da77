"""
Files written whole and folders held by one process: a crash, a full disk or a second process never
leaves a half-written checkpoint, log or dataset behind.
"""
import atexit
import errno
import os
import re
import shutil
import time
try:
    import fcntl  # POSIX: locks a folder; Windows has none (hold_folder says so)
except ImportError:
    fcntl = None

from machinery.process import fail


def temporary_path(path):
    """Where write_atomic writes path before renaming it: path.<pid>.partial, a name no one else's
    file has, which remove_stale_temporaries knows as ours."""
    return f"{path}.{os.getpid()}.partial"


def write_atomic(path, data, on_error=None):
    """Write data (bytes, or a function of the open file) into a temporary file, then rename it over
    path: a crash or a full disk leaves the previous file whole. A failed or interrupted write
    removes the temporary file; a failed one then calls on_error(path, error, size), or stops
    with one line. (Checkpoints go as bytes: torch's zip writer hides a full disk behind an
    unclear error.)"""
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
    """Why a write failed, with what to do: a full disk says how much room there is and what it
    needed."""
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
    """Remove the temporary files write_atomic left in folder when killed (the files they were to
    replace are whole); any other file, such as a user's notes.tmp, stays."""
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
    Returns the outermost folder it created, None if folder was there already (remove_empty_folders
    takes them away again)."""
    try:
        folder.encode("utf-8")
    # bytes that are not UTF-8 arrive from the command line as surrogates
    except UnicodeEncodeError:
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
    """Remove folder and the folders around it up to `created` (make_folder's answer), each if
    empty: a run that stopped before writing anything leaves no empty folder behind."""
    chain = folder_chain(folder)
    for path in reversed(chain[chain.index(created):] if created else []):
        try:
            os.rmdir(path)
        except OSError:  # not empty
            return


def hold_folder(folder, what, shared=False):
    """Hold folder for this process alone: an OS lock on the folder itself, released when the
    process ends, even by kill -9. A second process stops with one line saying who holds it (from
    the notes note_holder writes). shared: a lock that readers hold together (runs on a dataset)
    and that stops one holding it alone (prepare_wikipedia.py). Holding it again in the same
    process is no conflict (prepare_wikipedia.main called twice). Where the system or the file
    system has no locks (Windows, NFS without its lock service), one line warns (the sole
    holder's)."""
    if os.path.realpath(folder) in _held:
        return
    if fcntl is None:
        return None if shared else cannot_lock(folder, what, "this system has no fcntl locks")
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        # not held by another: there are no locks there
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            reason = f"{e.strerror}: its file system has no locks, e.g. NFS without lockd"
            return None if shared else cannot_lock(folder, what, reason)
        fail(f"{folder} is in use by {holders(folder)}; wait for it to finish, or use another "
             f"{what}")
    _held[os.path.realpath(folder)] = fd


def holders(folder):
    """Who holds folder, from the notes of those alive (note_holder): 'pid 12 (train.py ..., since
    ...)'."""
    notes = []
    for name in sorted(os.listdir(folder)):
        if re.fullmatch(r"\.lock(\.\d+)?", name):
            try:
                with open(os.path.join(folder, name)) as f:
                    note = f.read().strip()
                # a note left by kill -9 names a process that is gone
                os.kill(int(note.split()[1]), 0)
            except PermissionError:  # another user's process: alive
                pass
            except (OSError, ValueError, IndexError):
                continue
            notes.append(note)
    return " and ".join(notes) or "another process"


def cannot_lock(folder, what, reason):
    """hold_folder's one line where it cannot hold folder: the run goes on, unguarded."""
    print(f"warning: {folder} cannot be locked ({reason}), so nothing stops a second process from "
          f"writing there at the same time: run one at a time in this {what}", flush=True)


def note_holder(folder, command, shared=False):
    """Write who holds folder into folder/.lock (shared: .lock.<pid>, one per reader), for a second
    process's message; removed when this process exits normally (after kill -9 it stays, harmless:
    the lock itself is gone, and its pid with it)."""
    path = os.path.join(folder, f".lock.{os.getpid()}" if shared else ".lock")
    try:
        with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:  # any command line
            f.write(f"pid {os.getpid()} ({command}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n")
    except OSError:  # a full disk, a read-only dataset: the lock holds all the same
        pass
    atexit.register(lambda: os.path.exists(path) and os.remove(path))


_held = {}  # the folders this process holds (real paths) and the file descriptors of their locks


def release_folder(folder):
    """Let go of a folder this process holds alone, and of its note: for a caller that goes on after
    its work there (prepare_wikipedia.main called from Python, then a run that trains on it)."""
    fd = _held.pop(os.path.realpath(folder), None)
    if fd is not None:
        os.close(fd)  # the lock goes with its descriptor
    if os.path.exists(os.path.join(folder, ".lock")):
        os.remove(os.path.join(folder, ".lock"))


def claim_folder(folder, command, held_as="--out_dir", hold=True):
    """Make the folder a run or a preparation writes in, hold it for this process alone (hold=False:
    held already), note who holds it (command), and remove the temporary files of a write cut
    short; a process stopped before it wrote anything leaves no empty folder."""
    created = make_folder(folder)
    atexit.register(remove_empty_folders, folder, created)
    if hold:
        hold_folder(folder, held_as)
    note_holder(folder, command)
    remove_stale_temporaries(folder)
