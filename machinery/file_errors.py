"""
The one-line errors of files.py, off the way of a write or a hold that goes well: why a write
failed, why a folder cannot be made, who holds a folder, the warning where none can be locked.
"""
import errno
import os
import re
import shutil

import filelock

from machinery.files import folder_chain, let_go, temporary_path
from machinery.process import fail


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


def write_failed(path, error, data, on_error):
    """write_atomic's failure: its temporary file removed; an OSError given to on_error(path, error,
    size) or stopped with one line; anything else (Ctrl-C) raised again."""
    if os.path.lexists(temporary_path(path)):
        os.remove(temporary_path(path))
    if not isinstance(error, OSError):
        raise error
    size = None if callable(data) else len(data)
    if on_error:
        on_error(path, error, size)
    fail(f"could not write {path}: {write_error(path, error, size)}")


def cannot_make(folder, what, error):
    """make_folder's one line: a name not in UTF-8, a broken link, a file in the way, no room."""
    if isinstance(error, UnicodeEncodeError):
        fail(f"{what}={folder!r} is not a UTF-8 name; choose a name of UTF-8 text, e.g. letters, "
             f"digits, '_' and '-'")
    for path in folder_chain(folder):
        if os.path.islink(path) and not os.path.exists(path):
            fail(f"{what}={folder}: {path} is a broken link, to {os.readlink(path)}, which does "
                 f"not exist; create that folder, or choose another {what}")
    if isinstance(error, FileExistsError):
        fail(f"{what}={folder} is a file, not a folder; choose another {what}")
    if isinstance(error, NotADirectoryError):
        fail(f"{what}={folder} lies under a file, not a folder; choose another {what}")
    fail(f"cannot write in {what}={folder}: {write_error(os.path.join(folder, 'x'), error)}")


def cannot_hold(folder, what, shared, lock, error):
    """hold_folder's answer where it cannot hold folder: one line naming the process that holds it
    (from the notes hold_folder writes); where folder cannot be locked, a warning (a reader:
    nothing), and the run goes on, unguarded."""
    let_go(lock)
    if isinstance(error, filelock.Timeout):  # before OSError: it is one
        fail(f"{folder} is in use by {holders(folder)}; wait for it to finish, or use another "
             f"{what}")
    reason = getattr(error, "strerror", None) or type(error).__name__
    if isinstance(error, NotImplementedError) and error.args == ("this system has no fcntl locks",):
        reason = error.args[0]
    else:
        reason += ": its file system has no locks, e.g. NFS without lockd"
    if not shared:
        print(f"warning: {folder} cannot be locked ({reason}), so nothing stops a second process "
              f"from writing there at the same time: run one at a time in this {what}", flush=True)


def holders(folder):
    """Who holds folder, from the notes hold_folder writes: 'pid 12 (train.py ..., since ...)'."""
    notes = []
    for name in sorted(os.listdir(folder)):
        if re.fullmatch(r"\.lock(\.\d+)?", name):
            try:
                with open(os.path.join(folder, name)) as f:
                    notes.append(f.read().strip())
            except OSError:
                continue
    return " and ".join(notes) or "another process"
