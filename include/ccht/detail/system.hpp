// What the host machine allows, checked before ccht commits to it: memory that an allocation or a
// populated pool would take (so a budget the machine cannot hold is an error, not the OOM killer),
// and files that are regular (so a FIFO or a device given as a model or trace is refused instead
// of blocking open() for ever). Implemented in host/common/system.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ccht::detail {

/// Bytes this process can still take without swapping or the OOM killer: /proc/meminfo's
/// MemAvailable, lowered to the cgroup's memory.max - memory.current where a limit is set.
/// SIZE_MAX when neither can be read (the check is then skipped).
std::size_t host_memory_available() noexcept;

/// Allocations below this are not checked (reading /proc costs more than they do).
inline constexpr std::size_t memory_check_threshold = std::size_t{64} << 20;

/**
 * @brief Throws ccht::error out_of_memory when @p bytes exceed host_memory_available(), naming
 *        @p what, both sizes and @p hint (what the caller can change). Sizes below
 *        memory_check_threshold always pass.
 */
void check_host_memory(std::size_t bytes, std::string const& what, std::string const& hint = {});

/// Human-readable size ("1.5 GiB", "512 MiB", "4096 bytes") for error messages.
std::string format_bytes(std::uint64_t bytes);

/**
 * @brief Opens @p path read-only (close-on-exec) if it is a regular file. A FIFO, socket, device
 *        or directory is refused without blocking (the open itself is non-blocking).
 * @return the file descriptor (blocking mode)
 * @throws ccht::error invalid_argument "<path>: cannot open (...)" or "<path>: is not a regular
 *         file (a FIFO)"; the message starts with @p what when it is not empty
 */
int open_regular_file(std::string const& path, std::string const& what = {});

/// Throws like open_regular_file() unless @p path names a regular file (for readers that open
/// through iostreams; it stats the path, so use open_regular_file() where a descriptor will do).
void require_regular_file(std::string const& path, std::string const& what = {});

}  // namespace ccht::detail
