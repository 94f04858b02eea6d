/* The floor of `tunectl preload replay`'s design, without Python: what its two passes cost the kernel.
 *
 * Built and run by benchmarks/preload.py when a C compiler is present (apt-get install gcc).
 * Input: one "SIZE PATH" line per file, in the replay's physical order. Pass 1: THREADS
 * pthreads stat() every file (inodes into the cache, in parallel). Pass 2: one thread
 * open()s each file and fadvise(WILLNEED)s it in 8 MiB calls, back to back, and exits: the
 * caller waits for the reads by the replay's own rule (tunectl.preload.replay.wait_until_drained,
 * field 9 of sysfs stat), not a copy of it here. Prints the seconds of each pass and the total.
 *
 * Usage: preload_floor PATHS_FILE THREADS
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WINDOW (8L << 20)

static char **paths;
static long *sizes;
static long count;
static atomic_long next_file;

static void *stat_some(void *unused) {
    struct stat st;
    long first;
    (void)unused;
    while ((first = atomic_fetch_add(&next_file, 64)) < count)
        for (long i = first; i < first + 64 && i < count; i++)
            stat(paths[i], &st);
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PATHS_FILE THREADS\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[2]);
    if (threads < 1 || threads > 256)
        threads = 8;
    FILE *list = fopen(argv[1], "r");
    if (!list) {
        perror(argv[1]);
        return 2;
    }
    size_t cap = 1024;
    paths = malloc(cap * sizeof *paths);
    sizes = malloc(cap * sizeof *sizes);
    char line[8192];
    while (fgets(line, sizeof line, list)) {
        line[strcspn(line, "\n")] = 0;
        char *space = strchr(line, ' ');
        if (!space)
            continue;
        if ((size_t)count == cap) {
            cap *= 2;
            paths = realloc(paths, cap * sizeof *paths);
            sizes = realloc(sizes, cap * sizeof *sizes);
        }
        sizes[count] = atol(line);
        paths[count++] = strdup(space + 1);
    }
    fclose(list);

    double t0 = now();
    pthread_t workers[256];
    for (int i = 0; i < threads; i++)
        pthread_create(&workers[i], NULL, stat_some, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(workers[i], NULL);
    double t1 = now();
    for (long i = 0; i < count; i++) {
        int fd = open(paths[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
            continue;
        for (long off = 0; off < (sizes[i] ? sizes[i] : 1); off += WINDOW)
            posix_fadvise(fd, off, WINDOW, POSIX_FADV_WILLNEED);
        close(fd);
    }
    double t2 = now();
    printf("{\"stat\": %.4f, \"willneed\": %.4f, \"total\": %.4f}\n", t1 - t0, t2 - t1, t2 - t0);
    return 0;
}
