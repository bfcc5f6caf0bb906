// ccht::model_loader::load (cache/model_loader.hpp): segments of a file -> cache objects, the
// acquire / fill / publish loop, waits for other fillers, and the rollback on any failure.
#pragma once

#include <ccht/error.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <type_traits>
#include <optional>
#include <string>

namespace ccht {

template <class Backend>
std::shared_ptr<st_header const> model_loader<Backend>::header_for(std::string const& path,
                                                                   file_identity const& id) {
  std::optional<file_identity> old;
  {
    std::lock_guard lock(mu_);
    auto it = files_.find(path);
    if (it != files_.end()) {
      if (it->second.id == id) { return it->second.header; }
      old = it->second.id;
    }
  }
  auto header = std::make_shared<st_header const>(read_safetensors(path));
  if (!(identify_file(path) == id)) {
    throw error(error_code::invalid_argument, path + ": the file changed while its header was read");
  }
  std::shared_ptr<st_header const> old_header;
  {
    std::lock_guard lock(mu_);
    auto& slot = files_[path];
    if (slot.header && !(slot.id == id)) { old_header = slot.header; }
    slot = known_file{id, header, std::nullopt};
  }
  if (old && old_header) {  // a new version: its predecessor's unpinned objects go now
    std::vector<key_type> stale{file_key(*old)};
    for (auto const& t : old_header->tensors) { stale.push_back(tensor_key(*old, t.name)); }
    cache_.erase(stale);
  }
  return header;
}

template <class Backend>
key_type model_loader<Backend>::content_for(std::string const& path, file_identity const& id,
                                            st_header const& h) {
  {
    std::lock_guard lock(mu_);
    auto it = files_.find(path);
    if (it != files_.end() && it->second.id == id && it->second.content) {
      return *it->second.content;
    }
  }
  key_type const k = content_key(h, id.size, path);  // a few small reads: once per version
  if (!(identify_file(path) == id)) {
    throw error(error_code::invalid_argument, path + ": the file changed while it was sampled");
  }
  std::lock_guard lock(mu_);
  if (auto it = files_.find(path); it != files_.end() && it->second.id == id) {
    it->second.content = k;
  }
  return k;
}

/// Throws, naming the tensor, when one segment alone needs more pages than the budget has.
template <class Backend>
template <class Segments>
void model_loader<Backend>::check_fits(std::string const& path, Segments const& segs) const {
  for (auto const& sg : segs) {
    std::size_t const pages = cache_.pages_for(sg.bytes);
    if (pages <= cache_.num_pages()) { continue; }
    std::string const what = sg.name.empty() ? std::string("the data section")
                                             : "tensor '" + std::string(sg.name) + "'";
    throw error(error_code::invalid_size,
                path + ": " + what + " is " + std::to_string(sg.bytes) + " bytes, " +
                    std::to_string(pages) + " pages of " + std::to_string(cache_.page_bytes()) +
                    " bytes; the budget holds only " + std::to_string(cache_.num_pages()) +
                    " pages: raise the budget");
  }
}

/// The no_space error of a load, saying why: the model is larger than the budget, other holders
/// pin what it needs, or (nothing else pinned) its own pages collide in the page index.
template <class Backend>
template <class Segments>
error model_loader<Backend>::no_space_error(std::string const& path, Segments const& segs) const {
  std::size_t pages = 0;
  for (auto const& sg : segs) { pages += cache_.pages_for(sg.bytes); }
  std::size_t const pinned = cache_.stats().pages_pinned;
  std::string const need = std::to_string(pages) + " pages of " +
                           std::to_string(cache_.page_bytes()) + " bytes";
  std::string why;
  if (pages > cache_.num_pages()) {
    why = "the model needs " + need + " at once and the budget holds " +
          std::to_string(cache_.num_pages()) + ": raise the budget";
  } else if (pinned != 0) {
    why = "the model needs " + need + " and " + std::to_string(pinned) + " of the budget's " +
          std::to_string(cache_.num_pages()) + " pages are pinned by other holders";
  } else {
    why = "nothing else is pinned, but the model's " + need + " could not all be placed in the " +
          "budget's " + std::to_string(cache_.num_pages()) +
          " pages at once (its pages collide in the page index): raise the budget";
  }
  return error(error_code::out_of_memory, path + ": no space for the model: " + why);
}

template <class Backend>
loaded_model<Backend> model_loader<Backend>::load(std::string const& path) {
  auto const t0 = std::chrono::steady_clock::now();
  file_identity const id = identify_file(path);
  std::shared_ptr<st_header const> const h = header_for(path, id);

  // Segments: one object each, with where its bytes are in the file.
  struct segment {
    key_type key;
    std::uint64_t offset;
    std::size_t bytes;
    key_type remote = 0;        // contents key of the remote tier's chunks
    std::string_view name = {};  // the tensor (per_tensor), or empty for the data section
  };
  key_type const content = options_.remote != nullptr ? content_for(path, id, *h) : 0;
  std::vector<segment> segs;
  std::vector<std::size_t> seg_of(h->tensors.size(), SIZE_MAX);
  if (options_.layout == model_layout::packed) {
    if (h->data_bytes != 0) {
      segs.push_back({file_key(id), h->data_offset, h->data_bytes, content, {}});
    }
    for (std::size_t t = 0; t < h->tensors.size(); ++t) {
      if (h->tensors[t].bytes() != 0) { seg_of[t] = 0; }
    }
  } else {
    for (std::size_t t = 0; t < h->tensors.size(); ++t) {
      auto const& ti = h->tensors[t];
      if (ti.bytes() == 0) { continue; }
      seg_of[t] = segs.size();
      segs.push_back({tensor_key(id, ti.name), h->data_offset + ti.begin, ti.bytes(),
                      options_.remote != nullptr ? remote_chunk_key(content ^ tensor_key({}, ti.name), ~0u) : 0,
                      ti.name});
    }
  }
  check_fits(path, segs);

  loaded_model<Backend> m;
  m.path_ = path;
  m.report_.objects = segs.size();
  std::vector<std::byte*> base(segs.size(), nullptr);
  std::vector<key_type> held;  // published or hit objects this call holds
  int fd = -1;
  auto rollback = [&](std::vector<key_type> const& filling) {
    try {
      if (!filling.empty()) { cache_.abandon(filling); }
      if (!held.empty()) { cache_.release(held); }
    } catch (...) {  // already failing: report the first error
    }
    if (fd >= 0) { detail::close_file(fd); }
  };

  // Chunk c of a segment is its page c; the last chunk may be short.
  auto chunk_bytes = [&](segment const& sg, std::uint32_t c) {
    return std::min(cache_.page_bytes(), sg.bytes - std::size_t{c} * cache_.page_bytes());
  };
  auto fetch_remote = [&](auto const& sgs, auto const& td, auto const& ls, auto const& fl,
                          std::vector<std::vector<std::uint32_t>>& ff) {
    std::size_t const pbytes = cache_.page_bytes();
    std::vector<key_type> rk;
    std::vector<std::size_t> sizes;
    std::vector<std::byte*> dst;
    for (std::size_t f = 0; f < fl.size(); ++f) {
      auto const& sg = sgs[td[fl[f]]];
      for (std::uint32_t c : ff[f]) {
        rk.push_back(remote_chunk_key(sg.remote, c));
        sizes.push_back(chunk_bytes(sg, c));
        dst.push_back(ls[fl[f]].data + std::size_t{c} * pbytes);
      }
    }
    std::vector<std::byte> staging;
    constexpr bool host_pages = std::is_same_v<Backend, cpu_backend>;
    if constexpr (!host_pages) {  // device pages: fetch into host memory, then copy up
      staging.resize(rk.size() * pbytes);
    }
    std::vector<std::byte*> into(dst);
    if constexpr (!host_pages) {
      for (std::size_t q = 0; q < into.size(); ++q) { into[q] = staging.data() + q * pbytes; }
    }
    std::unique_ptr<bool[]> found(new bool[rk.size()]);
    std::size_t const hits =
        options_.remote->get(rk, into, sizes, std::span<bool>(found.get(), rk.size()));
    if (hits == 0) { return; }
    std::size_t q = 0;
    for (std::size_t f = 0; f < fl.size(); ++f) {
      std::vector<std::uint32_t> left;
      for (std::uint32_t c : ff[f]) {
        if (found[q]) {
          if constexpr (!host_pages) { Backend::copy_from_host(dst[q], into[q], sizes[q]); }
          ++m.report_.remote_pages;
          m.report_.remote_bytes += sizes[q];
        } else {
          left.push_back(c);
        }
        ++q;
      }
      ff[f] = std::move(left);
    }
    if constexpr (!host_pages) { Backend::synchronize({}); }
  };
  auto store_remote = [&](auto const& sgs, auto const& td, auto const& ls, auto const& fl,
                          std::vector<std::vector<std::uint32_t>> const& ff) {
    std::size_t const pbytes = cache_.page_bytes();
    std::vector<key_type> rk;
    std::vector<std::size_t> sizes;
    std::vector<std::byte const*> src;
    std::vector<std::byte> staging;
    std::size_t total = 0;
    for (std::size_t f = 0; f < fl.size(); ++f) { total += ff[f].size(); }
    constexpr bool host_pages = std::is_same_v<Backend, cpu_backend>;
    if constexpr (!host_pages) { staging.resize(total * pbytes); }
    for (std::size_t f = 0; f < fl.size(); ++f) {
      auto const& sg = sgs[td[fl[f]]];
      for (std::uint32_t c : ff[f]) {
        std::byte const* page = ls[fl[f]].data + std::size_t{c} * pbytes;
        if constexpr (!host_pages) {
          std::byte* h = staging.data() + rk.size() * pbytes;
          Backend::copy_to_host(h, page, chunk_bytes(sg, c));
          page = h;
        }
        rk.push_back(remote_chunk_key(sg.remote, c));
        sizes.push_back(chunk_bytes(sg, c));
        src.push_back(page);
      }
    }
    if constexpr (!host_pages) { Backend::synchronize({}); }
    m.report_.remote_writes += options_.remote->put_async(rk, src, sizes);
  };

  std::vector<std::size_t> todo(segs.size());
  for (std::size_t s = 0; s < segs.size(); ++s) { todo[s] = s; }
  std::size_t const pb = cache_.page_bytes();
  while (!todo.empty()) {
    std::vector<object_request> req;
    for (std::size_t s : todo) { req.push_back({segs[s].key, segs[s].bytes}); }
    std::vector<object_lease> leases(req.size());
    try {
      cache_.acquire(req, leases);
    } catch (...) {
      rollback({});
      throw;
    }
    std::vector<std::size_t> pending;
    std::vector<key_type> filling;
    std::vector<detail::fill_piece> pieces;
    std::vector<std::size_t> fill_leases;  // lease indices whose missing pages are read below
    bool refused = false;
    for (std::size_t e = 0; e < todo.size(); ++e) {
      std::size_t const s = todo[e];
      auto const& l = leases[e];
      switch (l.status) {
        case object_status::hit:
          held.push_back(segs[s].key);
          base[s] = l.data;
          ++m.report_.hits;
          break;
        case object_status::fill: {
          filling.push_back(segs[s].key);
          base[s] = l.data;
          ++m.report_.fills;
          fill_leases.push_back(e);
          break;
        }
        case object_status::pending: pending.push_back(s); break;
        case object_status::no_space: refused = true; break;
      }
    }
    if (refused) {
      rollback(filling);
      throw no_space_error(path, segs);
    }
    // The remote tier first (page by page), then runs of consecutive pages still missing
    // become one file read each.
    std::vector<std::vector<std::uint32_t>> from_file(fill_leases.size());
    for (std::size_t f = 0; f < fill_leases.size(); ++f) {
      from_file[f] = leases[fill_leases[f]].fill_pages;
    }
    if (options_.remote != nullptr && !fill_leases.empty()) {
      fetch_remote(segs, todo, leases, fill_leases, from_file);
    }
    for (std::size_t f = 0; f < fill_leases.size(); ++f) {
      std::size_t const s = todo[fill_leases[f]];
      auto const& l = leases[fill_leases[f]];
      auto const& fp = from_file[f];
      std::size_t i = 0;
      while (i < fp.size()) {
        std::size_t j = i + 1;
        while (j < fp.size() && fp[j] == fp[j - 1] + 1) { ++j; }
        std::size_t const from = std::size_t{fp[i]} * pb;
        std::size_t const to = std::min(std::size_t{fp[j - 1] + 1} * pb, segs[s].bytes);
        pieces.push_back({l.data + from, segs[s].offset + from, to - from});
        m.report_.pages_filled += j - i;
        m.report_.bytes_read += to - from;
        i = j;
      }
    }
    if (!pieces.empty()) {
      try {
        if (fd < 0) { fd = detail::open_for_read(path); }
        detail::file_filler<Backend>::fill(fd, path, pieces, options_);
        if (!(identify_file(path) == id)) {
          throw error(error_code::invalid_argument,
                      path + ": the file changed while it was read; nothing was cached");
        }
      } catch (...) {
        rollback(filling);
        throw;
      }
    }
    if (options_.remote != nullptr && !pieces.empty()) {
      store_remote(segs, todo, leases, fill_leases, from_file);
    }
    if (!filling.empty()) {
      cache_.publish(filling);
      held.insert(held.end(), filling.begin(), filling.end());
    }
    if (!pending.empty()) {
      std::vector<key_type> pk;
      for (std::size_t s : pending) { pk.push_back(segs[s].key); }
      ++m.report_.waits;
      if (!cache_.wait_ready(pk, options_.wait)) {
        rollback({});
        throw error(error_code::invalid_argument,
                    path + ": another caller's fill of this model did not finish within " +
                        std::to_string(options_.wait.count()) + " ms");
      }
    }
    todo = std::move(pending);
  }
  if (fd >= 0) { detail::close_file(fd); }

  for (std::size_t t = 0; t < h->tensors.size(); ++t) {
    auto const& ti = h->tensors[t];
    model_tensor mt{ti.name, ti.dtype, ti.shape, nullptr, static_cast<std::size_t>(ti.bytes())};
    if (seg_of[t] != SIZE_MAX) {
      std::size_t const s = seg_of[t];
      mt.data = base[s] + (options_.layout == model_layout::packed ? ti.begin : 0);
    }
    m.tensors_.push_back(std::move(mt));
  }
  m.keys_ = std::move(held);
  m.cache_ = &cache_;
  m.report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace ccht
