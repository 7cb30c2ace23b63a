/* SPDX-License-Identifier: MIT
 *
 * rocm-kpack C ABI: read .kpack archives and load GPU code objects for split
 * (HIPK) binaries. Drop-in for the reference librocm_kpack.so.0: same names,
 * argument lists and error values. Plain C99 and C++.
 *
 * Ownership in one place:
 *   kpack_open            -> kpack_archive_t, freed by kpack_close
 *   kpack_get_architecture / kpack_get_binary
 *                         -> strings owned by the archive, valid until
 *                            kpack_close; never free them
 *   kpack_get_kernel      -> buffer freed by kpack_free_kernel
 *   kpack_cache_create    -> kpack_cache_t, freed by kpack_cache_destroy
 *   kpack_load_code_object-> buffer freed by kpack_free_code_object
 * Returned buffers come from malloc(), so free() on them is also safe, but
 * portable callers use the kpack_free_* functions.
 *
 * No input, however malformed, makes these functions crash or abort; every
 * failure is a kpack_error_t. On failure, output pointers are set to NULL and
 * output sizes to 0 wherever the pointer itself was non-NULL.
 */
#ifndef ROCM_KPACK_H
#define ROCM_KPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kpack_export.h"
#include "kpack_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Archive lifecycle
 */

/* Open the .kpack archive at `path`: maps the file and parses header and TOC
 * (the blob region is not read until a kernel is requested).
 * On success *archive receives a handle the caller frees with kpack_close.
 * A TOC entry whose code object would be above 1 GiB is INVALID_FORMAT: no
 * kernel of an archive this library opened costs more memory than that.
 * Errors: INVALID_ARGUMENT (NULL argument), FILE_NOT_FOUND, IO_ERROR,
 * INVALID_FORMAT, UNSUPPORTED_VERSION, MSGPACK_PARSE_FAILED. */
KPACK_API kpack_error_t kpack_open(const char* path, kpack_archive_t* archive);

/* Close an archive and free everything it owns (including the strings
 * returned by the query functions). NULL is a no-op. Must not be called while
 * other threads use the archive. */
KPACK_API void kpack_close(kpack_archive_t archive);

/*
 * Querying. Returned strings are owned by the archive and stay valid until
 * kpack_close().
 */

/* Number of architectures (entries of the TOC's gfx_arches). */
KPACK_API kpack_error_t kpack_get_architecture_count(kpack_archive_t archive,
                                                     size_t* count);

/* Architecture `index` in gfx_arches order; INVALID_ARGUMENT if out of range. */
KPACK_API kpack_error_t kpack_get_architecture(kpack_archive_t archive,
                                               size_t index, const char** arch);

/* Number of binary keys ("<kernel_name>#<co_index>") in the TOC. */
KPACK_API kpack_error_t kpack_get_binary_count(kpack_archive_t archive,
                                               size_t* count);

/* Binary key `index` in lexicographic (byte) order; INVALID_ARGUMENT if out
 * of range. */
KPACK_API kpack_error_t kpack_get_binary(kpack_archive_t archive, size_t index,
                                         const char** binary);

/*
 * Kernel loading
 */

/* Decompress the kernel stored for (binary_name, arch) into a new buffer.
 * *kernel_data is freed by the caller with kpack_free_kernel; it stays valid
 * after kpack_close. Thread-safe on one archive handle; different kernels
 * decompress in parallel.
 * Errors: INVALID_ARGUMENT, KERNEL_NOT_FOUND, DECOMPRESSION_FAILED,
 * INVALID_FORMAT, OUT_OF_MEMORY, IO_ERROR. */
KPACK_API kpack_error_t kpack_get_kernel(kpack_archive_t archive,
                                         const char* binary_name,
                                         const char* arch, void** kernel_data,
                                         size_t* kernel_size);

/* Free a buffer returned by kpack_get_kernel. NULL is a no-op. */
KPACK_API void kpack_free_kernel(void* kernel_data);

/*
 * Loader
 */

/* Callback for kpack_enumerate_architectures: return true to continue,
 * false to stop. `arch` is valid only during the call. */
typedef bool (*kpack_arch_callback_t)(const char* arch, void* user_data);

/* Create a loader cache. The environment is read once, here:
 *   ROCM_KPACK_PATH          ':'-separated archive paths replacing all search paths
 *   ROCM_KPACK_PATH_PREFIX   ':'-separated archive paths searched first
 *   ROCM_KPACK_DISABLE       set, non-empty, not starting with '0': every
 *                            load returns KPACK_ERROR_NOT_IMPLEMENTED
 *   ROCM_KPACK_DEBUG         same truthiness: log the search ("kpack: ") to stderr
 *   ROCM_KPACK_ARCH_OVERRIDE comma-separated arch list replacing arch_list
 * Archives opened by loads stay open until kpack_cache_destroy. The cache is
 * thread-safe. *cache is freed with kpack_cache_destroy.
 * Errors: INVALID_ARGUMENT (cache is NULL), OUT_OF_MEMORY. */
KPACK_API kpack_error_t kpack_cache_create(kpack_cache_t* cache);

/* Destroy a cache and close its archives. NULL is a no-op. Must not be
 * called while other threads use the cache. Code objects already returned
 * stay valid. */
KPACK_API void kpack_cache_destroy(kpack_cache_t cache);

/* Find the file that is mapped at `address_in_binary` (Linux:
 * /proc/self/maps; " (deleted)" is stripped). Writes the NUL-terminated path
 * to path_out; if offset_out is not NULL it receives the file offset of the
 * address.
 * Errors: INVALID_ARGUMENT (NULL address or path_out, path_out_size 0, or the
 * path does not fit), PATH_DISCOVERY_FAILED (no file mapping holds the
 * address), NOT_IMPLEMENTED (unsupported platform). */
KPACK_API kpack_error_t kpack_discover_binary_path(const void* address_in_binary,
                                                   char* path_out,
                                                   size_t path_out_size,
                                                   size_t* offset_out);

/* Load the code object of wrapper `co_index` of a split binary.
 *   hipk_metadata  the marker the HIPK wrapper's `binary` field points at
 *                  (MessagePack {kpack_search_paths, kernel_name})
 *   binary_path    path of the binary holding the marker (relative search
 *                  paths are resolved against its directory)
 *   arch_list      target ids in priority order ("gfx942:sramecc+:xnack-",
 *                  optionally prefixed "amdgcn-amd-amdhsa--")
 * Search: for each arch, for each compatible variant (most specific first),
 * for each candidate archive in order, the first archive whose arch set holds
 * the variant decides: its kernel "<kernel_name>#<co_index>" or its error.
 * *code_object_out is freed with kpack_free_code_object.
 * Errors: INVALID_ARGUMENT (NULL pointer, arch_count 0), NOT_IMPLEMENTED
 * (ROCM_KPACK_DISABLE), INVALID_METADATA (bad marker), ARCHIVE_NOT_FOUND
 * (nothing openable), ARCH_NOT_FOUND (no compatible arch), KERNEL_NOT_FOUND,
 * and archive errors of the deciding archive. */
KPACK_API kpack_error_t kpack_load_code_object(
    kpack_cache_t cache, const void* hipk_metadata, const char* binary_path,
    uint32_t co_index, const char* const* arch_list, size_t arch_count,
    void** code_object_out, size_t* code_object_size_out);

/* Free a buffer returned by kpack_load_code_object. NULL is a no-op. */
KPACK_API void kpack_free_code_object(void* code_object);

/* Open the archive at archive_path, call callback once per architecture in
 * gfx_arches order until it returns false, close the archive.
 * Errors: INVALID_ARGUMENT (NULL path or callback), and those of kpack_open. */
KPACK_API kpack_error_t kpack_enumerate_architectures(
    const char* archive_path, kpack_arch_callback_t callback, void* user_data);

#ifdef __cplusplus
}
#endif

#endif /* ROCM_KPACK_H */
