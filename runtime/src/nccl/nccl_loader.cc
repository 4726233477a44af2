#include "nccl/nccl_loader.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <vector>

namespace mw::detail {

namespace {

constexpr const char* kNcclVariable = "MW_NCCL_LIBRARY";
constexpr const char* kCudartVariable = "MW_CUDART_LIBRARY";

struct Library {
  void* handle = nullptr;
  std::string file;  // the path the dynamic linker resolved, else the name asked for
};

std::string dlText() {
  const char* e = dlerror();
  return e != nullptr ? e : "no error text";
}

std::string versionText(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100) + " (" + std::to_string(v) + ")";
}

std::string resolvedPath(void* handle, const std::string& asked) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      *map->l_name != '\0') {
    return map->l_name;
  }
  return asked;
}

// The path of a library this process has loaded already whose file name starts with `prefix`
// ("libnccl.so": PyTorch's NCCL, say), or "" when there is none.
std::string alreadyLoaded(const std::string& prefix) {
  struct Search {
    const std::string& prefix;
    std::string found;
  } search{prefix, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        auto* s = static_cast<Search*>(arg);
        const std::string path = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const std::string base = path.substr(path.find_last_of('/') + 1);
        if (base.rfind(s->prefix, 0) != 0) return 0;
        s->found = path;
        return 1;
      },
      &search);
  return search.found;
}

// Opens `$variable` when it is set, else a library of `loaded_prefix` the process has already
// loaded (so that the process runs one NCCL and one CUDA runtime: PyTorch's, when PyTorch came
// first), else the first of `defaults` that opens. kUnavailable naming every file tried and
// dlerror's text for each.
Result<Library> open(const std::string& what, const char* variable,
                     const std::string& loaded_prefix, const std::vector<std::string>& defaults) {
  const char* chosen = std::getenv(variable);
  const bool from_variable = chosen != nullptr && *chosen != '\0';
  const std::string present = from_variable ? std::string() : alreadyLoaded(loaded_prefix);
  const std::vector<std::string> names = from_variable      ? std::vector<std::string>{chosen}
                                         : !present.empty() ? std::vector<std::string>{present}
                                                            : defaults;
  std::string tried;
  for (const std::string& name : names) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) return Library{h, resolvedPath(h, name)};
    tried += (tried.empty() ? "" : "; ") + ("dlopen(" + name + "): " + dlText());
  }
  const std::string hint = from_variable ? std::string(" (the file ") + variable + " names)"
                                         : std::string(" (set ") + variable + " to its path)";
  return Status(Code::kUnavailable, "cannot load " + what + ": " + tried + hint);
}

template <typename Fn>
Status bind(const Library& lib, const char* name, Fn& fn) {
  dlerror();
  fn = reinterpret_cast<Fn>(dlsym(lib.handle, name));
  if (fn != nullptr) return Status::Ok();
  return Status(Code::kUnavailable, lib.file + " lacks " + name + ": " + dlText());
}

// Reads NCCL's version into `api` and checks it against kMinNcclVersion.
Status checkVersion(NcclApi& api) {
  int& version = api.nccl_version;
  if (ncclResult_t r = api.ncclGetVersion(&version); r != ncclSuccess) {
    return Status(Code::kUnavailable,
                  api.nccl_file + ": ncclGetVersion failed: " + api.ncclGetErrorString(r));
  }
  if (version < kMinNcclVersion) {
    return Status(Code::kUnavailable, api.nccl_file + " is NCCL " + versionText(version) +
                                          ", older than the " + versionText(kMinNcclVersion) +
                                          " the NCCL backend needs (" + kNcclVariable +
                                          " picks another file)");
  }
  return Status::Ok();
}

Result<const NcclApi*> load() {
  const std::string cudart_major = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  auto cudart =
      open("the CUDA runtime", kCudartVariable, "libcudart.so", {cudart_major, "libcudart.so"});
  if (!cudart.ok()) return cudart.status();
  auto nccl = open("NCCL", kNcclVariable, "libnccl.so", {"libnccl.so.2"});
  if (!nccl.ok()) return nccl.status();
  NcclApi api;
  api.cudart_file = cudart->file;
  api.nccl_file = nccl->file;
#define MW_BIND_CUDART(name) MW_RETURN_IF_ERROR(bind(*cudart, #name, api.name));
#define MW_BIND_NCCL(name) MW_RETURN_IF_ERROR(bind(*nccl, #name, api.name));
  MW_CUDART_FUNCTIONS(MW_BIND_CUDART)
  MW_NCCL_FUNCTIONS(MW_BIND_NCCL)
#undef MW_BIND_NCCL
#undef MW_BIND_CUDART
  MW_RETURN_IF_ERROR(bind(*cudart, "cudaMalloc", api.cudaMalloc));
  MW_RETURN_IF_ERROR(checkVersion(api));
  static const NcclApi kept = std::move(api);  // load() runs once per process
  return &kept;
}

const Result<const NcclApi*>& loaded() {
  static const Result<const NcclApi*> result = load();
  return result;
}

}  // namespace

Result<const NcclApi*> loadNcclApi() { return loaded(); }

const NcclApi& ncclApi() { return *loaded().value(); }

}  // namespace mw::detail
