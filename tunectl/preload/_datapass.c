/* The clean case of `preload replay`'s data pass, compiled: tunectl.preload.replay._issue_with's per-file syscalls
 * without a Python frame, a stat_result or an exception per file.
 *
 * issue(entries, order, listed, start, end, directory_of, devnums, windows, flags, helper=False)
 *     -> (stop, files, bytes)
 *
 * Walks order[start:end] as _issue_with does: an entry not `listed` is passed over; a listed one is read here only
 * when every check _issue_with makes passes, with the same calls in the same order:
 *   - its directory resolved by `directory_of` (ListedOpener.directory, the Python side: kept, not followed), once
 *     per run of files in one directory; a directory opened without a descriptor (-1: a link on its way) stops;
 *   - a name the inode pass did not check (listed 2), in a directory that `directory_of` says to look in, looked at
 *     first without following it (fstatat AT_SYMLINK_NOFOLLOW): anything but a regular file stops, unopened;
 *   - opened relative to the directory's descriptor with `flags` (trust.LISTED_READ: O_NOFOLLOW, O_NONBLOCK,
 *     O_NOCTTY) and O_CLOEXEC, as os.open adds;
 *   - fstat, and the file must be the listed one: inode, size, mtime_ns, device number (devnums) and S_ISREG,
 *     before any read;
 *   - one fadvise(WILLNEED) for the whole file: only for a file of one range (0, size) no larger than its
 *     device's window (windows), as _issue_with's one-call case; anything else (chunks) stops before the open.
 * Whatever is not that clean case (a failed look, open, fstat or fadvise; a changed file; a directory that fails;
 * out of descriptors; chunks; a value that is not what the list holds) stops at that file: the pass returns its
 * position, and the Python loop takes that one file through its own code (which words every Skip, handles the
 * descriptors running out, and opens the file again itself), then calls here again from the next. So every
 * outcome but "read" is decided, and worded, in one place. A file stopped at after its open was closed first.
 * `end` is at most the next file where the Python side asks its pressure guard and counts progress (every 256).
 *
 * `helper` (true where a CPU is idle for it: replay.willneed_helper): the fadvise and the close of each file
 * checked here go to a second thread, in the order the files were checked (a ring of HANDED descriptors), while this
 * one checks the next: the checks (look, open, fstat) and the WILLNEED (the page cache's allocation and the block
 * layer's submission, about half the pass's CPU) then run side by side, the reads still sent in physical order from
 * one thread. Every check is made here, as without it, before a descriptor is handed over; the helper never touches
 * a Python object and is joined before the call returns (an exception raised included), every descriptor it was
 * handed closed. A failed fadvise stops the pass at that file, as inline: nothing after it is counted, and the
 * Python loop takes it again.
 *
 * Built with the limited API (abi3): one .so for every CPython from 3.9. Root imports it from the package
 * directory, which it trusts as it trusts the .py files beside it (installed by root, not writable by others).
 */
#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Entry's fields (tunectl.preload.listing.FIELDS) */
enum { PATH, DEVICE, INODE, SIZE, MTIME_NS, RANGES };

typedef struct {
    PyObject *dir;        /* the current directory, as bytes (fs-encoded), NULL: none yet */
    int dir_fd;
    int look;
    PyObject *device;     /* the current device (str, a strong reference), NULL: none yet */
    unsigned long long devnum;
    long long window;
} State;

/* After reading a value the list or the Python side holds: 1 when no exception is set, or one a value that is not
 * what the list holds raises (IndexError, TypeError, ValueError, OverflowError: cleared, and the caller stops at the
 * file, where the Python loop meets it again and words it); 0 for any other (a MemoryError, a KeyboardInterrupt,
 * whatever an object's own __index__ or __bool__ raised), left set for the pass to raise. */
static int cleared(void) {
    if (PyErr_Occurred() == NULL)
        return 1;
    if (!PyErr_ExceptionMatches(PyExc_IndexError) && !PyErr_ExceptionMatches(PyExc_TypeError) &&
        !PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_OverflowError))
        return 0;
    PyErr_Clear();
    return 1;
}

/* 1 when `ranges` is one range (0, size) (a 2-sequence of ints), 0 otherwise (an expected error cleared: not the
 * clean case), -1 on any other exception (raised) */
static int whole_file(PyObject *ranges, long long size) {
    int whole = 0;
    if (PySequence_Check(ranges) && PySequence_Size(ranges) == 1) {
        PyObject *range = PySequence_GetItem(ranges, 0);
        if (range != NULL && PyTuple_Check(range) && PyTuple_Size(range) == 2) {
            long long offset = PyLong_AsLongLong(PyTuple_GetItem(range, 0));
            long long length = PyLong_AsLongLong(PyTuple_GetItem(range, 1));
            whole = offset == 0 && length == size;
        }
        Py_XDECREF(range);
    }
    return cleared() ? whole : -1;
}

/* The directory of a path (`bytes`, fs-encoded, its last '/' at `slash`) made current: 1 when it has a descriptor to open its
 * files from, 0 to stop at the file (an OSError from directory_of cleared: Python meets it again; so is an answer
 * not (fd, look), or an fd past an int's range: never truncated to another descriptor), -1 on any other exception
 * (raised). */
static int enter_directory(State *s, const char *bytes, Py_ssize_t slash, PyObject *directory_of) {
    if (s->dir != NULL && PyBytes_Size(s->dir) == slash && memcmp(PyBytes_AsString(s->dir), bytes, slash) == 0)
        return s->dir_fd >= 0;
    Py_CLEAR(s->dir);
    s->dir_fd = -1;
    /* `directory or "/"`, decoded as os.fsdecode would (the list's own str, back from its fs-encoded bytes) */
    PyObject *name = slash ? PyUnicode_DecodeFSDefaultAndSize(bytes, slash) : PyUnicode_FromString("/");
    if (name == NULL)
        return -1;
    PyObject *found = PyObject_CallFunctionObjArgs(directory_of, name, NULL);
    Py_DECREF(name);
    if (found == NULL) {
        if (PyErr_ExceptionMatches(PyExc_OSError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    int ok = 0;
    if (PyTuple_Check(found) && PyTuple_Size(found) == 2) {
        long fd = PyLong_AsLong(PyTuple_GetItem(found, 0));
        int look = PyErr_Occurred() ? -1 : PyObject_IsTrue(PyTuple_GetItem(found, 1));
        if (look >= 0 && fd >= INT_MIN && fd <= INT_MAX) {
            s->dir = PyBytes_FromStringAndSize(bytes, slash);
            if (s->dir == NULL) {
                Py_DECREF(found);
                return -1;
            }
            s->dir_fd = (int)fd;
            s->look = look;
            ok = fd >= 0;
        }
    }
    Py_DECREF(found);
    return cleared() ? ok : -1;
}

/* The device of an entry made current (its number and window): 1, or 0 to stop (not in the dicts, or a value not
 * what they hold), -1 on any other exception (raised). */
static int enter_device(State *s, PyObject *device, PyObject *devnums, PyObject *windows) {
    if (s->device != NULL && (s->device == device || PyObject_RichCompareBool(s->device, device, Py_EQ) == 1))
        return 1;
    if (!cleared())
        return -1;
    Py_CLEAR(s->device);
    PyObject *devnum = PyDict_GetItem(devnums, device);   /* borrowed */
    PyObject *window = PyDict_GetItem(windows, device);
    if (devnum == NULL || window == NULL)
        return 0;
    s->devnum = PyLong_AsUnsignedLongLong(devnum);
    s->window = PyLong_AsLongLong(window);
    if (PyErr_Occurred())
        return cleared() ? 0 : -1;
    Py_INCREF(device);
    s->device = device;
    return 1;
}

#define HANDED 16  /* descriptors checked and waiting for the helper's fadvise: few (a low `ulimit -n`) */
#define WAKE 4     /* a waiting thread is woken when this many files (or places) are ready, not at each one: a
                    * wake-up per file cost a context switch each (46,000 on /usr/share, measured) */

/* The files checked and handed to the helper thread, in order; what it read. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t more;   /* the helper waits: WAKE files handed over, or no more */
    pthread_cond_t room;   /* the checking thread waits: WAKE free places */
    int fds[HANDED];
    long long sizes[HANDED];
    Py_ssize_t at[HANDED]; /* each file's position in `order` */
    int head, count, done;
    int helper_waits, checker_waits;
    Py_ssize_t failed_at;  /* the first position whose fadvise failed, -1: none */
    long long files, issued;
} Handed;

static void *willneed_handed(void *arg) {
    Handed *h = arg;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        if (h->count == 0) {
            if (h->done)
                break;
            h->helper_waits = 1;
            while (h->count < WAKE && !h->done)
                pthread_cond_wait(&h->more, &h->lock);
            h->helper_waits = 0;
            continue;
        }
        int fd = h->fds[h->head];
        long long size = h->sizes[h->head];
        Py_ssize_t at = h->at[h->head];
        h->head = (h->head + 1) % HANDED;
        h->count--;
        if (h->checker_waits && h->count <= HANDED - WAKE)
            pthread_cond_signal(&h->room);
        int failed = h->failed_at >= 0;  /* after a failure nothing more is read: closed only */
        pthread_mutex_unlock(&h->lock);
        int ok = !failed && posix_fadvise(fd, 0, size, POSIX_FADV_WILLNEED) == 0;
        close(fd);
        pthread_mutex_lock(&h->lock);
        if (ok) {
            h->files++;
            h->issued += size;
        } else if (h->failed_at < 0) {
            h->failed_at = at;
        }
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* `fd` (checked) handed to the helper, waiting for room; called without the GIL. */
static void hand_over(Handed *h, int fd, long long size, Py_ssize_t at) {
    pthread_mutex_lock(&h->lock);
    if (h->count == HANDED) {
        h->checker_waits = 1;
        while (h->count > HANDED - WAKE)
            pthread_cond_wait(&h->room, &h->lock);
        h->checker_waits = 0;
    }
    int tail = (h->head + h->count) % HANDED;
    h->fds[tail] = fd;
    h->sizes[tail] = size;
    h->at[tail] = at;
    h->count++;
    if (h->helper_waits && h->count >= WAKE)
        pthread_cond_signal(&h->more);
    pthread_mutex_unlock(&h->lock);
}

/* One listed file read (or, with `handed`, checked and handed over to be read), every check passed: 1; 0 to stop
 * at it (nothing read, any descriptor closed). */
static int read_one(const State *s, const char *name, int checked, int flags, unsigned long long inode,
                    long long size, long long mtime_ns, Handed *handed, Py_ssize_t at) {
    struct stat st;
    int ok = 0;
    Py_BEGIN_ALLOW_THREADS
    if (!(s->look && checked != 1) ||
        (fstatat(s->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))) {
        int fd = openat(s->dir_fd, name, flags | O_CLOEXEC);
        if (fd >= 0) {
            if (fstat(fd, &st) == 0 && (unsigned long long)st.st_ino == inode && (long long)st.st_size == size &&
                (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec == mtime_ns &&
                (unsigned long long)st.st_dev == s->devnum && S_ISREG(st.st_mode)) {
                if (handed != NULL) {
                    hand_over(handed, fd, size, at);
                    fd = -1;
                    ok = 1;
                } else {
                    ok = posix_fadvise(fd, 0, size, POSIX_FADV_WILLNEED) == 0;
                }
            }
            if (fd >= 0)
                close(fd);
        }
    }
    Py_END_ALLOW_THREADS
    return ok;
}

static PyObject *issue(PyObject *self, PyObject *args) {
    PyObject *entries, *order, *listed, *directory_of, *devnums, *windows;
    Py_ssize_t start, end;
    int flags, helper = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOYnnOO!O!i|p", &entries, &order, &listed, &start, &end, &directory_of,
                          &PyDict_Type, &devnums, &PyDict_Type, &windows, &flags, &helper))
        return NULL;
    Handed h;
    Handed *handed = NULL;
    pthread_t thread;
    if (helper) {
        memset(&h, 0, sizeof h);
        h.failed_at = -1;
        if (pthread_mutex_init(&h.lock, NULL) == 0) {
            if (pthread_cond_init(&h.more, NULL) == 0) {
                if (pthread_cond_init(&h.room, NULL) == 0) {
                    /* every signal blocked in the helper for its whole life (it inherits the mask): a stop sent
                     * to the process is taken by the main thread alone, where Python's handlers run (as
                     * tunectl.system.interrupts.threads_without_stops does for Python's threads) */
                    sigset_t all, mask;
                    sigfillset(&all);
                    pthread_sigmask(SIG_SETMASK, &all, &mask);
                    int started = pthread_create(&thread, NULL, willneed_handed, &h) == 0;
                    pthread_sigmask(SIG_SETMASK, &mask, NULL);
                    if (started) {
                        handed = &h;  /* else (no thread to be had): read here, as without a helper */
                    } else {
                        pthread_cond_destroy(&h.room);
                    }
                }
                if (handed == NULL)
                    pthread_cond_destroy(&h.more);
            }
            if (handed == NULL)
                pthread_mutex_destroy(&h.lock);
        }
    }
    const char *marks = PyByteArray_AsString(listed);
    Py_ssize_t nmarks = PyByteArray_Size(listed);
    State s = {NULL, -1, 1, NULL, 0, 0};
    long long files = 0, issued = 0;
    Py_ssize_t k = start;
    int failed = 0;
    for (; k < end; k++) {
        PyObject *index = PySequence_GetItem(order, k);
        if (index == NULL) {
            failed = 1;
            break;
        }
        Py_ssize_t i = PyLong_AsSsize_t(index);
        Py_DECREF(index);
        if (i < 0 || i >= nmarks) {  /* (an error, or out of range: Python raises it at this file) */
            failed = !cleared();
            break;
        }
        int checked = marks[i];
        if (!checked)
            continue;
        PyObject *entry = PySequence_GetItem(entries, i);
        if (entry == NULL) {
            failed = !cleared();
            break;
        }
        int done = 0;
        if (PyTuple_Check(entry) && PyTuple_Size(entry) > RANGES) {
            PyObject *path = PyTuple_GetItem(entry, PATH);
            unsigned long long inode = PyLong_AsUnsignedLongLong(PyTuple_GetItem(entry, INODE));
            long long size = PyLong_AsLongLong(PyTuple_GetItem(entry, SIZE));
            long long mtime_ns = PyLong_AsLongLong(PyTuple_GetItem(entry, MTIME_NS));
            PyObject *bytes = PyErr_Occurred() || !PyUnicode_Check(path) ? NULL : PyUnicode_EncodeFSDefault(path);
            if (!cleared()) {
                Py_XDECREF(bytes);
                Py_DECREF(entry);
                failed = 1;
                break;
            }
            if (bytes != NULL) {
                const char *p = PyBytes_AsString(bytes);
                const char *last = strrchr(p, '/');
                Py_ssize_t length = PyBytes_Size(bytes);
                int found = -1;
                if (last != NULL && (Py_ssize_t)strlen(p) == length && last[1] != '\0') {  /* no NUL inside */
                    found = enter_directory(&s, p, last - p, directory_of);
                    if (found > 0)
                        found = enter_device(&s, PyTuple_GetItem(entry, DEVICE), devnums, windows);
                    if (found > 0)
                        found = size >= 0 && size <= s.window ? whole_file(PyTuple_GetItem(entry, RANGES), size) : 0;
                    if (found > 0 && read_one(&s, last + 1, checked, flags, inode, size, mtime_ns, handed, k)) {
                        if (handed == NULL) {
                            files++;
                            issued += size;
                        }
                        done = 1;
                    }
                }
                Py_DECREF(bytes);
                if (found < 0)
                    failed = 1;
            }
        }
        Py_DECREF(entry);
        if (!done)
            break;
    }
    Py_XDECREF(s.dir);
    Py_XDECREF(s.device);
    if (handed != NULL) {  /* every file handed over read (or, after a failed fadvise, closed), before returning */
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&h.lock);
        h.done = 1;
        pthread_cond_signal(&h.more);
        pthread_mutex_unlock(&h.lock);
        pthread_join(thread, NULL);
        Py_END_ALLOW_THREADS
        pthread_cond_destroy(&h.room);
        pthread_cond_destroy(&h.more);
        pthread_mutex_destroy(&h.lock);
        files = h.files;
        issued = h.issued;
        if (h.failed_at >= 0 && h.failed_at < k)
            k = h.failed_at;  /* the Python loop takes that file again, and words why it did not read */
    }
    if (failed && PyErr_Occurred())
        return NULL;
    return Py_BuildValue("nLL", k, files, issued);
}

static PyMethodDef methods[] = {
    {"issue", issue, METH_VARARGS,
     "issue(entries, order, listed, start, end, directory_of, devnums, windows, flags, helper=False)\n"
     "-> (stop, files, bytes)\n"
     "The data pass's clean case over order[start:end]; stops at the first file it leaves to the Python loop.\n"
     "helper: each file's WILLNEED sent from a second thread while this one checks the next."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_datapass",
    "The clean case of preload replay's data pass, compiled (see tunectl.preload.replay._issue_with).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__datapass(void) {
    return PyModule_Create(&module);
}
