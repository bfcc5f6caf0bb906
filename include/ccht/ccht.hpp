/**
 * @file ccht.hpp
 * @brief Umbrella header: everything a user of ccht needs.
 */
#pragma once

#include <ccht/backend.hpp>
#include <ccht/cache/kv_keys.hpp>
#include <ccht/cache/model_loader.hpp>
#include <ccht/cache/page_cache.hpp>
#include <ccht/cache/safetensors.hpp>
#include <ccht/cache/weight_cache.hpp>
#include <ccht/config.hpp>
#include <ccht/core/bucket.hpp>
#include <ccht/core/bucket_ops.hpp>
#include <ccht/core/hash.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/core/tile.hpp>
#include <ccht/core/types.hpp>
#include <ccht/error.hpp>
#include <ccht/policy_list.hpp>
#include <ccht/table.hpp>
#include <ccht/table_ref.hpp>
