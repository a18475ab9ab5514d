/* Preloaded before libfaketime into a skewed implementation process: clock_nanosleep on a clock libfaketime
 * leaves alone (FAKETIME_DONT_FAKE_MONOTONIC=1) goes straight to the kernel. libfaketime 0.9.10 shifts an
 * absolute CLOCK_MONOTONIC deadline by the wall-clock offset anyway, and the kernel refuses the result with
 * EINVAL: that is Python's time.sleep. Every other clock goes on to libfaketime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *request, struct timespec *remain) {
    static int (*next)(clockid_t, int, const struct timespec *, struct timespec *);
    if (clock_id == CLOCK_MONOTONIC || clock_id == CLOCK_MONOTONIC_RAW || clock_id == CLOCK_BOOTTIME) {
        /* clock_nanosleep returns the error number itself, not -1 with errno */
        return syscall(SYS_clock_nanosleep, clock_id, flags, request, remain) == 0 ? 0 : errno;
    }
    if (next == NULL) {
        next = (int (*)(clockid_t, int, const struct timespec *, struct timespec *))dlsym(RTLD_NEXT, "clock_nanosleep");
    }
    return next(clock_id, flags, request, remain);
}
