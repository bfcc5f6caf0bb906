/**
 * @file store_hook.hpp
 * @brief The one entry point of the lockstep runner that core/atomics.hpp calls, in builds with
 *        CCHT_LANE_HOOKS (the `lanes` preset): every store and read-modify-write of a shared
 *        word reports its address, so that two lanes storing to one word in one step are a
 *        racing_store hazard (lockstep_tile.hpp). Other builds never include this.
 */
#pragma once

namespace ccht::lanes::detail {

/// Records a store to @p address by the lane running now (nothing outside a lockstep run).
void note_store(void const* address) noexcept;

}  // namespace ccht::lanes::detail
