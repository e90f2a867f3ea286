/*
 * ip2md: open a .NET core dump with libcdac and name the methods owning code addresses.
 *
 *   cc -o ip2md ip2md.c -I../include -L<dir of libcdac.so> -lcdac
 *   ./ip2md CORE ADDR...
 *
 * Prints one line per address:
 *   ADDR md=MD start=START size=HOT_SIZE kind=jit|r2r|unknown funclet=0|1 NAME
 * or "ADDR not managed code", or "ADDR error CODE: MESSAGE".
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cdac.h"

static void print_error(const char *what, int32_t status) {
    char message[512];
    cdac_last_error(message, sizeof message);
    fprintf(stderr, "%s: error %d: %s\n", what, (int)status, message);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s CORE ADDR...\n", argv[0]);
        return 2;
    }
    cdac_handle *h = NULL;
    int32_t status = cdac_open_core(argv[1], &h);
    if (status != CDAC_OK) {
        print_error(argv[1], status);
        return 1;
    }
    int failures = 0;
    for (int i = 2; i < argc; i++) {
        uint64_t ip = strtoull(argv[i], NULL, 16);
        cdac_method_info info;
        status = cdac_ip2md(h, ip, &info);
        if (status == CDAC_NOT_FOUND) {
            printf("0x%" PRIx64 " not managed code\n", ip);
            continue;
        }
        if (status != CDAC_OK) {
            char message[512];
            cdac_last_error(message, sizeof message);
            printf("0x%" PRIx64 " error %d: %s\n", ip, (int)status, message);
            failures++;
            continue;
        }
        /* Ask for the size first, then fetch the name. */
        size_t needed = 0;
        status = cdac_method_name(h, ip, NULL, 0, &needed);
        char *name = NULL;
        if (status == CDAC_E_BUFFER_TOO_SMALL && (name = malloc(needed)) != NULL) {
            status = cdac_method_name(h, ip, name, needed, &needed);
        }
        const char *kind = info.kind == CDAC_CODE_JIT            ? "jit"
                           : info.kind == CDAC_CODE_READY_TO_RUN ? "r2r"
                                                                 : "unknown";
        printf("0x%" PRIx64 " md=0x%" PRIx64 " start=0x%" PRIx64 " size=0x%" PRIx64
               " kind=%s funclet=%u %s\n",
               ip, info.method_desc, info.start, info.hot_size, kind, info.is_funclet,
               status == CDAC_OK && name ? name : "?");
        free(name);
    }
    cdac_close(h);
    return failures ? 1 : 0;
}
