// The ABI of libcachalot.so as a framework sees it: the library is dlopen()ed (never linked),
// every C entry point and hook resolves with dlsym, the dynamic symbol table defines nothing
// but cachalot_ symbols, and the DT_NEEDED list and the version requirements name only the C
// library (no libstdc++ or libgcc_s: both are linked in; no libcudart, no libcuda, no libfmt:
// the CUDA driver is loaded at run time, fmt is header-only). The library
// path is the built one unless CACHALOT_LIBRARY names another (for a carried build on another
// machine). This process points CACHALOT_CUDA_DRIVER at a library that does not exist, so that
// the CUDA backend's failure to find a driver can be seen through the C API on any machine.
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cachalot/cachalot.h"
#include "cachalot/hooks.h"

namespace {

constexpr const char* kMissingDriver = "/nonexistent/cachalot-exports-test/libcuda.so.1";

// Before main(), so before libcachalot.so could load a driver.
const bool g_driver_hidden = [] {
  setenv("CACHALOT_CUDA_DRIVER", kMissingDriver, 1);
  return true;
}();

std::string library_path() {
  const char* env = std::getenv("CACHALOT_LIBRARY");
  return (env != nullptr && *env != '\0') ? env : CACHALOT_SHARED_LIBRARY;
}

const char* const kEntryPoints[] = {
    "cachalot_create",
    "cachalot_destroy",
    "cachalot_malloc",
    "cachalot_free",
    "cachalot_free_sized",
    "cachalot_record_stream",
    "cachalot_empty_cache",
    "cachalot_trim",
    "cachalot_get_stats",
    "cachalot_reset_peak_stats",
    "cachalot_memory_summary",
    "cachalot_status_string",
    "cachalot_last_error",
    "cachalot_torch_malloc",
    "cachalot_torch_free",
    "cachalot_torch_record_stream",
    "cachalot_torch_empty_cache",
    "cachalot_cupy_malloc",
    "cachalot_cupy_free",
    "cachalot_torch_set_memory_fraction",
    "cachalot_torch_begin_allocate_to_pool",
    "cachalot_torch_end_allocate_to_pool",
    "cachalot_torch_release_pool",
    "cachalot_memory_snapshot",
    "cachalot_default_configure",
    "cachalot_default_set_memory_fraction",
    "cachalot_default_exists",
    "cachalot_default_handle",
    "cachalot_default_malloc",
    "cachalot_default_free",
    "cachalot_default_record_stream",
    "cachalot_default_empty_cache",
    "cachalot_default_reset_peak_stats",
    "cachalot_default_get_stats",
    "cachalot_default_memory_summary",
    "cachalot_default_memory_snapshot",
};

// The dynamic symbols, DT_NEEDED entries and version requirements of an ELF64 shared object.
struct dynamic_info {
  std::vector<std::string> defined;   // defined global/weak symbols of .dynsym
  std::vector<std::string> needed;    // DT_NEEDED library names
  std::vector<std::string> versions;  // .gnu.version_r: "libc.so.6 GLIBC_2.34", one per version
};

dynamic_info read_dynamic_info(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> file((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  dynamic_info info;
  if (file.size() < sizeof(Elf64_Ehdr)) return info;
  Elf64_Ehdr eh;
  std::memcpy(&eh, file.data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) {
    return info;
  }
  auto section = [&](std::size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, file.data() + eh.e_shoff + i * eh.e_shentsize, sizeof sh);
    return sh;
  };
  auto string_at = [&](const Elf64_Shdr& strtab, std::size_t offset) {
    return std::string(file.data() + strtab.sh_offset + offset);
  };
  for (std::size_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr sh = section(i);
    if (sh.sh_type == SHT_DYNSYM) {
      const Elf64_Shdr strtab = section(sh.sh_link);
      for (std::size_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); ++k) {
        Elf64_Sym sym;
        std::memcpy(&sym, file.data() + sh.sh_offset + k * sizeof(Elf64_Sym), sizeof sym);
        const unsigned bind = ELF64_ST_BIND(sym.st_info);
        if (sym.st_shndx == SHN_UNDEF || sym.st_name == 0) continue;
        if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
        info.defined.push_back(string_at(strtab, sym.st_name));
      }
    } else if (sh.sh_type == SHT_DYNAMIC) {
      const Elf64_Shdr strtab = section(sh.sh_link);
      for (std::size_t k = 0; k < sh.sh_size / sizeof(Elf64_Dyn); ++k) {
        Elf64_Dyn dyn;
        std::memcpy(&dyn, file.data() + sh.sh_offset + k * sizeof(Elf64_Dyn), sizeof dyn);
        if (dyn.d_tag == DT_NEEDED) info.needed.push_back(string_at(strtab, dyn.d_un.d_val));
      }
    } else if (sh.sh_type == SHT_GNU_verneed) {
      const Elf64_Shdr strtab = section(sh.sh_link);
      std::size_t at = sh.sh_offset;
      for (std::size_t k = 0; k < sh.sh_info; ++k) {
        Elf64_Verneed need;
        std::memcpy(&need, file.data() + at, sizeof need);
        std::size_t aux_at = at + need.vn_aux;
        for (std::size_t v = 0; v < need.vn_cnt; ++v) {
          Elf64_Vernaux aux;
          std::memcpy(&aux, file.data() + aux_at, sizeof aux);
          info.versions.push_back(string_at(strtab, need.vn_file) + " " +
                                  string_at(strtab, aux.vna_name));
          aux_at += aux.vna_next;
        }
        at += need.vn_next;
      }
    }
  }
  return info;
}

class SharedLibrary : public ::testing::Test {
 protected:
  void SetUp() override {
    // RTLD_NODELETE: like a framework, never unload the allocator library while its memory
    // may still be in use.
    handle_ = dlopen(library_path().c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    ASSERT_NE(handle_, nullptr) << "dlopen(" << library_path() << "): " << dlerror();
  }
  void TearDown() override {
    if (handle_ != nullptr) dlclose(handle_);
  }
  template <class F>
  F* get(const char* name) {
    return reinterpret_cast<F*>(dlsym(handle_, name));
  }
  void* handle_ = nullptr;
};

TEST_F(SharedLibrary, EveryEntryPointAndHookResolves) {
  for (const char* name : kEntryPoints) {
    EXPECT_NE(dlsym(handle_, name), nullptr) << name << " is not exported";
  }
}

TEST_F(SharedLibrary, CApiWorksThroughDlsym) {
  auto* create = get<decltype(cachalot_create)>("cachalot_create");
  auto* destroy = get<decltype(cachalot_destroy)>("cachalot_destroy");
  auto* cmalloc = get<decltype(cachalot_malloc)>("cachalot_malloc");
  auto* cfree = get<decltype(cachalot_free)>("cachalot_free");
  auto* stats = get<decltype(cachalot_get_stats)>("cachalot_get_stats");
  ASSERT_TRUE(create && destroy && cmalloc && cfree && stats);
  cachalot_allocator* a = nullptr;
  ASSERT_EQ(create("backend:simulated,capacity:1GiB", &a), CACHALOT_SUCCESS);
  void* p = nullptr;
  ASSERT_EQ(cmalloc(a, &p, 4096, nullptr), CACHALOT_SUCCESS);
  EXPECT_NE(p, nullptr);
  cachalot_stats s{};
  s.size = sizeof s;
  ASSERT_EQ(stats(a, &s), CACHALOT_SUCCESS);
  EXPECT_EQ(s.allocations.all.current, 1u);
  EXPECT_EQ(cfree(a, p, nullptr), CACHALOT_SUCCESS);
  destroy(a);
}

TEST(SharedLibraryElf, ExportsOnlyCachalotSymbols) {
  const dynamic_info info = read_dynamic_info(library_path());
  ASSERT_FALSE(info.defined.empty()) << "no dynamic symbols read from " << library_path();
  for (const std::string& name : info.defined) {
    EXPECT_EQ(name.rfind("cachalot_", 0), 0u) << "unexpected exported symbol: " << name;
  }
  for (const char* name : kEntryPoints) {
    EXPECT_NE(std::find(info.defined.begin(), info.defined.end(), name), info.defined.end())
        << name << " missing from .dynsym";
  }
}

// libstdc++ and libgcc are linked in (src/CMakeLists.txt): the library needs only the C
// library, so that it loads in processes whose libstdc++ is older than the one it was built
// with (conda, PyTorch environments: GCC 12's libstdc++ needs GLIBCXX_3.4.30, which they lack;
// tests/shared_library loads it beside such a one).
TEST(SharedLibraryElf, NeedsOnlyTheCLibrary) {
  if (!CACHALOT_STATIC_LIBSTDCXX) {
    GTEST_SKIP() << "SKIPPED: built where the compiler has no static libstdc++ (CMake warned): "
                    "libcachalot.so needs its libstdc++.so.6";
  }
  const dynamic_info info = read_dynamic_info(library_path());
  ASSERT_FALSE(info.needed.empty());
  const char* const allowed[] = {"libc.so",  "libm.so",       "ld-linux",
                                 "libdl.so", "libpthread.so", "librt.so"};
  for (const std::string& lib : info.needed) {
    bool ok = false;
    for (const char* prefix : allowed) ok = ok || lib.rfind(prefix, 0) == 0;
    EXPECT_TRUE(ok) << "unexpected DT_NEEDED: " << lib;
    EXPECT_EQ(lib.find("cudart"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("libcuda"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("fmt"), std::string::npos) << lib;
  }
}

TEST(SharedLibraryElf, RequiresNoCxxRuntimeVersion) {
  if (!CACHALOT_STATIC_LIBSTDCXX) {
    GTEST_SKIP() << "SKIPPED: built where the compiler has no static libstdc++ (CMake warned): "
                    "libcachalot.so needs its libstdc++.so.6";
  }
  const dynamic_info info = read_dynamic_info(library_path());
  ASSERT_FALSE(info.versions.empty()) << "no version requirements read from " << library_path();
  for (const std::string& v : info.versions) {
    const std::string version = v.substr(v.find(' ') + 1);
    EXPECT_EQ(version.rfind("GLIBC_", 0), 0u) << "requires " << v;
    EXPECT_EQ(v.find("GLIBCXX"), std::string::npos) << v;
    EXPECT_EQ(v.find("CXXABI"), std::string::npos) << v;
    EXPECT_EQ(v.find("GCC_"), std::string::npos) << v;
  }
}

// The CUDA backend needs only the driver, found at run time: without one, backend:cuda fails
// with the loader's reason, through the C API, and the simulated device still works.
TEST_F(SharedLibrary, TheCudaBackendLooksForTheDriverOnlyAtRunTime) {
  ASSERT_TRUE(g_driver_hidden);
  auto* create = get<decltype(cachalot_create)>("cachalot_create");
  auto* destroy = get<decltype(cachalot_destroy)>("cachalot_destroy");
  auto* last_error = get<decltype(cachalot_last_error)>("cachalot_last_error");
  ASSERT_TRUE(create && destroy && last_error);
  cachalot_allocator* a = nullptr;
  EXPECT_EQ(create("backend:cuda", &a), CACHALOT_ERROR_BACKEND);
  EXPECT_EQ(a, nullptr);
  const std::string why = last_error();
  EXPECT_NE(why.find(kMissingDriver), std::string::npos) << why;
  ASSERT_EQ(create("backend:auto,capacity:1GiB", &a), CACHALOT_SUCCESS) << last_error();
  destroy(a);
}

}  // namespace
