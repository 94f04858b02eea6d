/* The clean case of `preload replay`'s data pass, compiled: tunectl.preload.replay._issue_with's per-file syscalls
 * without a Python frame, a stat_result or an exception per file.
 *
 * issue(paths, devices, device, inode, size, mtime_ns, count, first, base, offset, length, order, listed, start,
 *       end, directory_of, devnums, windows, flags[, own[, issuers]]) -> (stop, files, bytes)
 *
 * Reads a list's columns as they are (tunectl.preload.replay.pass_columns, columns.Chunk.pass_columns): `paths`
 * (str) and `devices` (MAJ:MIN) lists, and bytes of native numbers, one per path: device (u32, an index into
 * devices), inode, size (u64), mtime_ns (i64), count (u32, the entry's ranges); `first` (u64, where each entry's
 * ranges begin, less `base`), None when the entries have one pair each (entry i's is pair i); offset and length
 * (u64), the pairs. No Entry tuple is made here: a replay makes one only for a file this pass stops at.
 * Walks order[start:end] as _issue_with does: an entry not `listed` is passed over; a listed one is read here only
 * when every check _issue_with makes passes, with the same calls in the same order:
 *   - its directory resolved once per run of files in one directory: with `own`, here (decide_directory, the same
 *     decision as ListedOpener.directory, without a Python call: ~5,000 directories in /usr/share), else by
 *     `directory_of` (ListedOpener.directory, kept, not followed); a directory without a descriptor (a link on its
 *     way) or that fails stops;
 *   - a name the inode pass did not check (listed 2), in a directory that `directory_of` says to look in, looked at
 *     first without following it (fstatat AT_SYMLINK_NOFOLLOW): anything but a regular file stops, unopened;
 *   - opened relative to the directory's descriptor with `flags` (trust.LISTED_READ: O_NOFOLLOW, O_NONBLOCK,
 *     O_NOCTTY) and O_CLOEXEC, as os.open adds; where no name is looked at, by openat2 with RESOLVE_NO_XDEV;
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
 * With `own` the span is planned first, with the GIL, then read with the GIL let go: by one issuer in order, a batch
 * of files at a time (the GIL let go a few times a span, not once a file), or with `issuers` 2 (a replay on flash)
 * by two threads at once, each every other block of BLOCK files, answered as one issuer would, with a 4th item:
 * whether an issuer stopped before the plan's end.
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
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_openat2
#define SYS_openat2 437  /* the same number on every architecture (trust._SYS_OPENAT2) */
#endif
#define RESOLVE_NO_XDEV_ 0x01
#define RESOLVE_NO_MAGICLINKS_ 0x02
#define RESOLVE_NO_SYMLINKS_ 0x04

#define MIN_SPLIT 32  /* a span shorter than this is read by one issuer: a thread's start would cost more than it gains */
#define FIRST_BATCH 8  /* one issuer's first batch of a call (see issue) */

typedef struct {
    PyObject *dir;        /* the current directory, as bytes (fs-encoded), NULL: none yet */
    int dir_fd;
    int look;
    Py_ssize_t device;    /* the current device's index into `devices`, -1: none yet */
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

/* ENOSYS once: directory_of (which then walks or opens per file) decides from then on (read and set by the issuers
 * with the GIL released: atomically) */
static int openat2_missing;

/* tunectl.system.trust.ListedOpener.directory's decision, in C; keep the two the same (tests/unit/preload/
 * test_preload_directories.py compares them on good and hostile directories, tests/root/preload too on other
 * owners and a real nodev mount). The directory `path` opened O_PATH by openat2 with RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS (trust._directory_no_link): no link on the way or at its end is followed. Then whether a
 * name not checked is looked at before it is opened: always, but on a file system mounted nodev (fstatvfs of the
 * descriptor) in a directory chosen by no other (trust.chosen_by_no_other, fstat of the descriptor: owned by root
 * or this process's user, no group or other write bit). Returns 0 with *fd (the caller's to close) and *look, or an
 * errno: ELOOP (a link on the way: ListedOpener answers (-1, look) and opens such files one by one), ENOSYS (no
 * openat2), or whatever the open, fstatvfs or fstat said (ListedOpener raises it). Never the GIL held. */
static int decide_directory(const char *path, int *fd, int *look) {
    unsigned long long how[3] = {O_PATH | O_DIRECTORY | O_CLOEXEC, 0, RESOLVE_NO_SYMLINKS_ | RESOLVE_NO_MAGICLINKS_};
    struct statvfs vfs;
    struct stat st;
    int d = (int)syscall(SYS_openat2, AT_FDCWD, path, how, sizeof how);
    if (d < 0)
        return errno;
    if (fstatvfs(d, &vfs) != 0 || ((vfs.f_flag & ST_NODEV) && fstat(d, &st) != 0)) {
        int code = errno;
        close(d);
        return code;
    }
    *look = !(vfs.f_flag & ST_NODEV) || !((st.st_uid == 0 || st.st_uid == geteuid()) && !(st.st_mode & 022));
    *fd = d;
    return 0;
}

/* The directory of a path (`bytes`, fs-encoded, its last '/' at `slash`) made current, by directory_of (the
 * descriptor ListedOpener's: its walk, no openat2, or a test's; with `own` a span is planned instead, its directories
 * decided by the issuer: issue_share): 1 when it has a descriptor to open its files from, 0 to stop at the file (an
 * OSError from directory_of cleared: Python meets it again; so is an answer not (fd, look), or an fd past an int's
 * range: never truncated to another descriptor), -1 on any other exception (raised). */
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

/* The device at `index` of `devices` made current (its number and window): 1, or 0 to stop (not listed, not in the
 * dicts, or a value not what they hold), -1 on any other exception (raised). */
static int enter_device(State *s, Py_ssize_t index, PyObject *devices, PyObject *devnums, PyObject *windows) {
    if (s->device == index)
        return 1;
    s->device = -1;
    if (index >= PyList_Size(devices))
        return 0;
    PyObject *device = PyList_GetItem(devices, index);  /* borrowed */
    PyObject *devnum = PyDict_GetItem(devnums, device);   /* borrowed */
    PyObject *window = PyDict_GetItem(windows, device);
    if (devnum == NULL || window == NULL)
        return 0;
    s->devnum = PyLong_AsUnsignedLongLong(devnum);
    s->window = PyLong_AsLongLong(window);
    if (PyErr_Occurred())
        return cleared() ? 0 : -1;
    s->device = index;
    return 1;
}

/* One listed file read from the directory `dir_fd` (its names looked at first: `look`), every check passed: 1; 0 to
 * stop at it (nothing read, any descriptor closed). Never the GIL held. */
static int read_file(int dir_fd, int look, unsigned long long devnum, const char *name, int checked, int flags,
                     unsigned long long inode, long long size, long long mtime_ns) {
    struct stat st;
    int ok = 0;
    if (!(look && checked != 1) || (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))) {
        /* no look (nodev, chosen by no other): nor across a mount on the name (trust.open_unlooked; EXDEV, ENOSYS
         * stop here and the Python loop decides) */
        unsigned long long how[3] = {(unsigned long long)(flags | O_CLOEXEC), 0, RESOLVE_NO_XDEV_};
        int fd = look ? openat(dir_fd, name, flags | O_CLOEXEC)
                      : (int)syscall(SYS_openat2, dir_fd, name, how, sizeof how);
        if (fd >= 0) {
            if (fstat(fd, &st) == 0 && (unsigned long long)st.st_ino == inode && (long long)st.st_size == size &&
                (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec == mtime_ns &&
                (unsigned long long)st.st_dev == devnum && S_ISREG(st.st_mode))
                ok = posix_fadvise(fd, 0, size, POSIX_FADV_WILLNEED) == 0;
            close(fd);
        }
    }
    return ok;
}

static int read_one(const State *s, const char *name, int checked, int flags, unsigned long long inode,
                    long long size, long long mtime_ns) {
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = read_file(s->dir_fd, s->look, s->devnum, name, checked, flags, inode, size, mtime_ns);
    Py_END_ALLOW_THREADS
    return ok;
}

/* A column of `n` numbers of `size` bytes each (bytes in native order): its first byte, NULL (ValueError raised)
 * when it is not that long. */
static const char *column(PyObject *bytes, Py_ssize_t n, Py_ssize_t size) {
    if (PyBytes_Size(bytes) != n * size) {
        PyErr_SetString(PyExc_ValueError, "a column of another length than the paths");
        return NULL;
    }
    return PyBytes_AsString(bytes);
}

static unsigned long long u64(const char *column, Py_ssize_t i) {
    unsigned long long v;
    memcpy(&v, column + i * 8, 8);
    return v;
}

/* A file of a span planned for the issuers (issue): its path (fs-encoded, kept by the plan), where its last '/'
 * is, what it must be (the list's inode, size, mtime_ns, its device's number), its index in the list and its listed
 * mark (0: passed over); `read` 1 set by the issuer that read it, 2 read by an earlier span (READ_AHEAD). */
typedef struct {
    const char *path;
    Py_ssize_t slash;
    unsigned long long inode, devnum;
    long long size, mtime_ns;
    Py_ssize_t index;
    int checked, read;
} Planned;

/* An issuer's current directory: its path (`len` bytes, -1: none), the descriptor decide_directory gave (-1: none)
 * and whether names are looked at there. issue_share opens it and keeps it from one file to the next, and from one
 * batch to the next (one issuer); whoever holds the Dir closes it once the reading is done (close_dir): issue() for
 * a lone issuer's, read_two for each of two issuers'. */
typedef struct {
    char path[PATH_MAX];
    Py_ssize_t len;
    int fd, look;
} Dir;

#define NO_DIR {.len = -1, .fd = -1, .look = 1}  /* no directory yet */

/* A Dir let go: its descriptor closed, none current. */
static void close_dir(Dir *d) {
    if (d->fd >= 0)
        close(d->fd);
    d->fd = -1;
    d->len = -1;
}

/* One issuer's part of a plan of `to` files: every file from `from` on when it is the only one (`alone`), else the
 * blocks of BLOCK files from `from` on, every other one; `stop`, once it ran, the first position it did not read
 * (`to`: none) */
typedef struct {
    Planned *files;
    Py_ssize_t from, to, stop;
    int flags;
    int alone;  /* the only issuer: every file from `from` on, in order */
    Dir *dir;
} Share;

#define BLOCK 16
#define READ_AHEAD 3  /* a listed mark: read by an issuer past an earlier stop (read_two), counted when reached */

/* An issuer: its part's files read in order, as issue() reads them, until the first it does not read (a directory
 * that fails, a file that is not the listed one, any failed call): the Python loop decides that one. Its own
 * directory descriptor per run of files in one directory (decide_directory, in w->dir). Never the GIL held. */
static void *issue_share(void *arg) {
    Share *w = arg;
    Dir *d = w->dir;
    Py_ssize_t k = w->from;
    for (; k < w->to; k += w->alone || k % BLOCK != BLOCK - 1 ? 1 : BLOCK + 1) {
        Planned *f = &w->files[k];
        if (!f->checked)
            continue;
        if (d->len != f->slash || memcmp(d->path, f->path, f->slash) != 0) {
            close_dir(d);
            if (f->slash >= PATH_MAX || __atomic_load_n(&openat2_missing, __ATOMIC_RELAXED))
                break;
            memcpy(d->path, f->path, f->slash);
            d->path[f->slash] = '\0';
            int code = decide_directory(f->slash ? d->path : "/", &d->fd, &d->look);
            if (code == ENOSYS)
                __atomic_store_n(&openat2_missing, 1, __ATOMIC_RELAXED);
            if (code != 0 || d->fd < 0) {
                d->fd = -1;
                break;
            }
            d->len = f->slash;
        }
        if (!read_file(d->fd, d->look, f->devnum, f->path + f->slash + 1, f->checked, w->flags, f->inode, f->size,
                       f->mtime_ns))
            break;
        f->read = 1;
    }
    w->stop = k < w->to ? k : w->to;
    return NULL;
}

/* The files of a plan (n of them, order[start:start + n]) read by two issuers at once, the GIL released for the whole
 * span: blocks of BLOCK files taken in turn, the first by this thread, the second by another (both one after the
 * other by this one when no thread starts). Both stay within a block of each other, so their reads land near each
 * other and still merge: halves (128 files apart) made the replay 1.36x slower on this project's virtio disk, blocks
 * of 16 0.82x (cold /usr/share, physical order, 2 CPUs). The answer is one issuer's (`answer`): the stop the lowest
 * position an issuer stopped at (every position before it was read by one of them). A file an issuer read past that
 * stop was read: its listed mark is set to READ_AHEAD, and it is counted (files, bytes), never opened again, when this
 * pass, called again from past the stop, or the Python loop reaches it, as one issuer would count it then. So the
 * replay's counts at every point (a stop the Python loop makes at that file counts what one issuer read), the files
 * it reads and the files it hands back, in order, are one issuer's; only the reads are sent sooner. */
static long long spans_split;  /* spans a second issuer read part of (split()), under the GIL */

static Py_ssize_t read_two(Planned *plan, Py_ssize_t n, int flags) {
    Dir da = NO_DIR, db = NO_DIR;
    Share a = {plan, 0, n, n, flags, 0, &da}, b = {plan, BLOCK, n, n, flags, 0, &db};
    int started;
    Py_BEGIN_ALLOW_THREADS
    pthread_t other;
    started = n > BLOCK && pthread_create(&other, NULL, issue_share, &b) == 0;
    issue_share(&a);
    if (started)
        pthread_join(other, NULL);
    else
        issue_share(&b);
    close_dir(&da);
    close_dir(&db);
    Py_END_ALLOW_THREADS
    spans_split += started;
    return a.stop < b.stop ? a.stop : b.stop;
}

/* The planned files from `from` to `to` read by this thread alone, in order, the GIL released once for all of them,
 * from the directory `dir` the batch before left open where the run goes on: the first position it did not read
 * (`to`: none). */
static Py_ssize_t read_alone(Planned *plan, Py_ssize_t from, Py_ssize_t to, int flags, Dir *dir) {
    Share a = {plan, from, to, to, flags, 1, dir};
    Py_BEGIN_ALLOW_THREADS
    issue_share(&a);
    Py_END_ALLOW_THREADS
    return a.stop;
}

/* What a plan of n files read up to `stop` answers: (stop, files, bytes), with `files` and `issued` counted before
 * it, and with two issuers a 4th item: whether one stopped before the plan's end (the caller reads the rest of the
 * span with one, rather than plan it again and start a thread per stop: a stale list, a directory through a link). */
static PyObject *answer(Planned *plan, Py_ssize_t n, Py_ssize_t stop, Py_ssize_t start, char *marks, long long files,
                        long long issued, int two) {
    for (Py_ssize_t k = 0; k < n; k++) {
        if (plan[k].read && k < stop) {
            files++;
            issued += plan[k].size;
        } else if (plan[k].read == 1)
            marks[plan[k].index] = READ_AHEAD;
    }
    return two ? Py_BuildValue("nLLi", start + stop, files, issued, stop < n)
               : Py_BuildValue("nLL", start + stop, files, issued);
}

/* A range's start, step and length, where each fits a Py_ssize_t: 0 (else *len stays -1: its items are asked of it,
 * one by one), -1 on any other exception (raised). Its items then lie between its start and stop: no sum overflows. */
static int range_of(PyObject *range, Py_ssize_t *start, Py_ssize_t *step, Py_ssize_t *len) {
    Py_ssize_t values[2];
    const char *names[2] = {"start", "step"};
    for (int n = 0; n < 2; n++) {
        PyObject *value = PyObject_GetAttrString(range, names[n]);
        values[n] = value == NULL ? -1 : PyLong_AsSsize_t(value);
        Py_XDECREF(value);
        if (values[n] == -1 && PyErr_Occurred())
            return PyErr_ExceptionMatches(PyExc_OverflowError) ? (PyErr_Clear(), 0) : -1;
    }
    Py_ssize_t n = PySequence_Size(range);
    if (n < 0)
        return PyErr_ExceptionMatches(PyExc_OverflowError) ? (PyErr_Clear(), 0) : -1;
    *start = values[0];
    *step = values[1];
    *len = n;
    return 0;
}

static PyObject *issue(PyObject *self, PyObject *args) {
    PyObject *paths, *devices, *index_col, *inode_col, *size_col, *mtime_col, *count_col, *first_col, *offset_col;
    PyObject *length_col, *order, *listed, *directory_of, *devnums, *windows;
    Py_ssize_t base, start, end;
    int flags, own = 0, issuers = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!SSSSSOnSSOYnnOO!O!i|pi", &PyList_Type, &paths, &PyList_Type, &devices,
                          &index_col, &inode_col, &size_col, &mtime_col, &count_col, &first_col, &base, &offset_col,
                          &length_col, &order, &listed, &start, &end, &directory_of, &PyDict_Type, &devnums,
                          &PyDict_Type, &windows, &flags, &own, &issuers))
        return NULL;
    Py_ssize_t n = PyList_Size(paths);
    if (first_col != Py_None && !PyBytes_Check(first_col)) {
        PyErr_SetString(PyExc_TypeError, "first: bytes or None");
        return NULL;
    }
    const char *indices = column(index_col, n, 4), *inodes = indices ? column(inode_col, n, 8) : NULL;
    const char *sizes = inodes ? column(size_col, n, 8) : NULL, *mtimes = sizes ? column(mtime_col, n, 8) : NULL;
    const char *counts = mtimes ? column(count_col, n, 4) : NULL;
    const char *firsts = counts == NULL || first_col == Py_None ? NULL : column(first_col, n, 8);
    if (counts == NULL || (first_col != Py_None && firsts == NULL))
        return NULL;
    Py_ssize_t npairs = PyBytes_Size(offset_col) / 8;
    if (PyBytes_Size(offset_col) != npairs * 8 || PyBytes_Size(length_col) != npairs * 8) {
        PyErr_SetString(PyExc_ValueError, "offset and length: columns of another length than each other");
        return NULL;
    }
    const char *offsets = PyBytes_AsString(offset_col), *lengths = PyBytes_AsString(length_col);
    const char *marks = PyByteArray_AsString(listed);
    Py_ssize_t nmarks = PyByteArray_Size(listed);
    if (nmarks > n)
        nmarks = n;
    State s = {NULL, -1, 1, -1, 0, 0};
    long long files = 0, issued = 0;
    Py_ssize_t k = start;
    int failed = 0;
    /* with `own`, the span planned here, with the GIL, up to the first file that is not the clean case (every test
     * but the directory's and the file's own, which the issuer makes), and read with the GIL let go: by two issuers
     * (`two`) once planned whole (read_two), or by this thread alone a batch at a time as it is planned (read_alone),
     * the batches FIRST_BATCH files, then twice as many each time: a span of clean files lets go of the GIL a few
     * times, not once a file, and a call that stops at its first file (a stale list stops at every file) plans a few
     * files past it, not the whole span */
    int planned = own && !__atomic_load_n(&openat2_missing, __ATOMIC_RELAXED);
    int two = planned && issuers > 1 && end - start >= MIN_SPLIT;
    Py_ssize_t batch = FIRST_BATCH, unread = start;  /* one issuer: files planned from `unread` on: unread */
    Py_ssize_t stop_alone = -1;  /* where it stopped before the last file planned */
    Dir dir = NO_DIR;  /* its directory, from batch to batch */
    Planned *plan = planned ? PyMem_Calloc((size_t)(end - start), sizeof *plan) : NULL;
    PyObject *held = planned ? PyList_New(0) : NULL;  /* the plan's paths, fs-encoded */
    if (planned && (plan == NULL || held == NULL)) {
        PyMem_Free(plan);
        Py_XDECREF(held);
        return PyErr_NoMemory();
    }
    /* a streamed chunk's order, range(len(chunk)): its items computed here rather than made one int a file */
    Py_ssize_t range_start = 0, range_step = 0, range_len = -1;
    if (PyObject_TypeCheck(order, &PyRange_Type) && range_of(order, &range_start, &range_step, &range_len) < 0) {
        PyMem_Free(plan);
        Py_XDECREF(held);
        return NULL;
    }
    for (; k < end; k++) {
        if (planned && !two && k - unread >= batch) {
            Py_ssize_t stop = read_alone(plan, unread - start, k - start, flags, &dir);
            if (stop < k - start) {
                stop_alone = stop;
                break;
            }
            unread = k;
            batch *= 2;
        }
        Py_ssize_t i;
        if (k >= 0 && k < range_len)
            i = range_start + k * range_step;  /* order[k] of a range, no int made (between its start and stop) */
        else {
            PyObject *at = PySequence_GetItem(order, k);
            if (at == NULL) {
                failed = 1;
                break;
            }
            i = PyLong_AsSsize_t(at);
            Py_DECREF(at);
        }
        if (i < 0 || i >= nmarks) {  /* (an error, or out of range: Python raises it at this file) */
            failed = !cleared();
            break;
        }
        int checked = marks[i];
        if (!checked)
            continue;
        if (checked == READ_AHEAD) {  /* read by an issuer past an earlier stop: counted here, where one issuer reads */
            if (planned) {  /* (planned as read: counted by `answer` if the issuers' stop is past it) */
                plan[k - start].read = 2;
                plan[k - start].size = (long long)u64(sizes, i);
            } else {
                files++;
                issued += (long long)u64(sizes, i);
            }
            continue;
        }
        PyObject *path = PyList_GetItem(paths, i);  /* borrowed */
        unsigned long long inode = u64(inodes, i), size = u64(sizes, i);
        long long mtime_ns = (long long)u64(mtimes, i);
        unsigned int device, count;
        memcpy(&device, indices + i * 4, 4);
        memcpy(&count, counts + i * 4, 4);
        /* its one pair: the i-th (one pair each), or where `first` says, less `base` (the chunk's first pair) */
        unsigned long long pair = firsts ? u64(firsts, i) - (unsigned long long)base : (unsigned long long)i;
        int whole = count == 1 && pair < (unsigned long long)npairs && u64(offsets, (Py_ssize_t)pair) == 0 &&
                    u64(lengths, (Py_ssize_t)pair) == size;
        PyObject *bytes = PyUnicode_Check(path) ? PyUnicode_EncodeFSDefault(path) : NULL;
        if (!cleared()) {
            Py_XDECREF(bytes);
            failed = 1;
            break;
        }
        int done = 0;
        if (bytes != NULL) {
            const char *p = PyBytes_AsString(bytes);
            const char *last = strrchr(p, '/');
            int found = -1;
            if (last != NULL && (Py_ssize_t)strlen(p) == PyBytes_Size(bytes) && last[1] != '\0') {  /* no NUL */
                found = planned ? 1 : enter_directory(&s, p, last - p, directory_of);
                if (found > 0)
                    found = enter_device(&s, (Py_ssize_t)device, devices, devnums, windows);
                /* the clean case: one range, the whole file, no larger than the device's window */
                if (found > 0)
                    found = whole && size <= (unsigned long long)LLONG_MAX && (long long)size <= s.window;
                if (found > 0 && planned) {  /* planned: read by an issuer */
                    Planned f = {p, last - p, inode, s.devnum, (long long)size, mtime_ns, i, checked, 0};
                    plan[k - start] = f;
                    if (PyList_Append(held, bytes) == 0)
                        done = 1;
                    else
                        found = -1;
                } else if (found > 0 && read_one(&s, last + 1, checked, flags, inode, (long long)size, mtime_ns)) {
                    files++;
                    issued += (long long)size;
                    done = 1;
                }
            }
            Py_DECREF(bytes);
            if (found < 0)
                failed = 1;
        }
        if (!done)
            break;
    }
    Py_XDECREF(s.dir);
    PyObject *result;
    if (failed && PyErr_Occurred())
        result = NULL;
    else if (planned) {
        Py_ssize_t stop = two ? read_two(plan, k - start, flags)
                          : stop_alone >= 0 ? stop_alone : read_alone(plan, unread - start, k - start, flags, &dir);
        result = answer(plan, k - start, stop, start, (char *)marks, files, issued, two);
    } else
        result = Py_BuildValue("nLL", k, files, issued);
    close_dir(&dir);
    PyMem_Free(plan);
    Py_XDECREF(held);
    return result;
}

/* directory(path) -> (fd, look): decide_directory for one directory, as ListedOpener.directory answers: (-1, True)
 * for a link on the way, OSError for any other failure; the descriptor is the caller's to close. */
static PyObject *directory(PyObject *self, PyObject *args) {
    PyObject *bytes;
    int fd = -1, look = 1, code;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &bytes))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    code = decide_directory(PyBytes_AsString(bytes), &fd, &look);
    Py_END_ALLOW_THREADS
    if (code != 0 && code != ELOOP) {
        errno = code;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, PyTuple_GetItem(args, 0));
        Py_DECREF(bytes);
        return NULL;
    }
    Py_DECREF(bytes);
    return Py_BuildValue("(iO)", fd, look ? Py_True : Py_False);
}

/* split() -> the spans of issue() read by two issuers at once since the module was loaded (tests, -v) */
static PyObject *split(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLongLong(spans_split);
}

static PyMethodDef methods[] = {
    {"split", split, METH_NOARGS, "split() -> the spans of issue() read by two issuers at once so far"},
    {"directory", directory, METH_VARARGS,
     "directory(path) -> (fd, look)\nListedOpener.directory's decision, made here (the replay's own, see issue)."},
    {"issue", issue, METH_VARARGS,
     "issue(paths, devices, device, inode, size, mtime_ns, count, first, base, offset, length, order, listed, start,"
     " end, directory_of, devnums, windows, flags[, own[, issuers]]) -> (stop, files, bytes[, issuer_stopped])\n"
     "The data pass's clean case over order[start:end]; stops at the first file it leaves to the Python loop."},
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
