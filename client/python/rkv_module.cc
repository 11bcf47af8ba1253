// The Python extension module rkv._rkv: rkv::Client behind a class that
// Python threads may share. The package (client/python/rkv/__init__.py)
// re-exports what is public. Only the library's public header is used, as
// any other program linking librkv would.
//
// Threads: each call releases the GIL before it waits for the client's lock
// and the network, so other Python threads run meanwhile; the lock makes one
// client safe to share (its calls run one at a time), and clients opened one
// per thread run in parallel.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rkv/client.h"

namespace py = pybind11;

namespace {

// A failed operation's status, thrown where the GIL may be released and
// turned into the matching Python exception by the translator below.
struct StatusError {
  absl::Status status;
  bool write = false;  // A write: Unavailable means its outcome is unknown.
};

// The exception classes, created at import (module init holds the GIL, and
// the module lives until the interpreter ends).
struct Exceptions {
  py::object error, unavailable, invalid_argument, resource_exhausted, permission_denied, timeout;
};
Exceptions* exceptions = nullptr;

py::object NewException(py::module_& m, const char* name, py::object bases, const char* doc) {
  py::object cls = py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc(absl::StrCat("rkv.", name).c_str(), doc, bases.ptr(), nullptr));
  if (!cls) throw py::error_already_set();
  m.attr(name) = cls;
  return cls;
}

void Raise(const StatusError& e) {
  const absl::Status& s = e.status;
  py::object cls = exceptions->error;
  std::string message(s.message());
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
      cls = exceptions->unavailable;
      if (e.write && !absl::StrContains(message, "outcome unknown")) {
        absl::StrAppend(&message, " (outcome unknown: the write may or may not take effect)");
      }
      break;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      cls = exceptions->invalid_argument;
      break;
    case absl::StatusCode::kResourceExhausted:
      cls = exceptions->resource_exhausted;
      break;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      cls = exceptions->permission_denied;
      break;
    case absl::StatusCode::kDeadlineExceeded:
      cls = exceptions->timeout;
      break;
    default:
      break;
  }
  py::object instance = cls(message);
  instance.attr("code") = py::str(absl::StatusCodeToString(s.code()));
  PyErr_SetObject(cls.ptr(), instance.ptr());
}

void Check(absl::Status s, bool write) {
  if (!s.ok()) throw StatusError{std::move(s), write};
}

// A key or value as the client takes it: a str (as UTF-8) or any object
// with the buffer protocol (bytes, bytearray, memoryview, a NumPy array...),
// read in place. Made and destroyed with the GIL held; read without it.
class Bytes {
 public:
  explicit Bytes(const py::handle& object) {
    if (py::isinstance<py::str>(object)) {
      Py_ssize_t size = 0;
      const char* data = PyUnicode_AsUTF8AndSize(object.ptr(), &size);
      if (data == nullptr) throw py::error_already_set();
      owned_ = std::string(data, static_cast<size_t>(size));
      return;
    }
    if (!PyObject_CheckBuffer(object.ptr())) {
      throw py::type_error(absl::StrCat("rkv: keys and values are bytes-like objects or str, not ",
                                        std::string(py::str(object.get_type().attr("__name__")))));
    }
    // PyBUF_SIMPLE asks for one contiguous run of bytes: a strided view
    // (a slice with a step) is refused with BufferError, not copied.
    auto buffer = std::make_unique<Py_buffer>();
    if (PyObject_GetBuffer(object.ptr(), buffer.get(), PyBUF_SIMPLE) != 0) {
      throw py::error_already_set();
    }
    owned_ = std::move(buffer);
  }
  Bytes(Bytes&& other) noexcept : owned_(std::move(other.owned_)) {
    other.owned_ = std::monostate();
  }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  ~Bytes() {
    if (auto* buffer = std::get_if<std::unique_ptr<Py_buffer>>(&owned_); buffer && *buffer) {
      PyBuffer_Release(buffer->get());
    }
  }

  // Computed on each call: a moved std::string's short buffer moves with it.
  absl::string_view view() const {
    if (const auto* s = std::get_if<std::string>(&owned_)) return *s;
    const Py_buffer& b = *std::get<std::unique_ptr<Py_buffer>>(owned_);
    return absl::string_view(static_cast<const char*>(b.buf), static_cast<size_t>(b.len));
  }

 private:
  std::variant<std::monostate, std::string, std::unique_ptr<Py_buffer>> owned_;
};

// A value returned without a copy into a bytes object: a read-only buffer
// over the string the library filled, for get_view().
struct Value {
  std::string bytes;
};

py::bytes ToBytes(const std::string& s) { return py::bytes(s.data(), s.size()); }

class PyClient {
 public:
  PyClient(const std::string& coordinator, const std::optional<std::string>& token,
           const rkv::ClientOptions& base)
      : window_(size_t{4} * std::max<uint32_t>(1, base.max_outstanding)) {
    rkv::ClientOptions options = base;
    if (token) options.cluster_token = *token;
    absl::StatusOr<std::unique_ptr<rkv::Client>> client;
    {
      py::gil_scoped_release release;
      client = rkv::Client::OpenCluster(coordinator, options);
    }
    if (!client.ok()) throw StatusError{client.status()};
    client_ = std::move(*client);
  }
  // Also when Python drops an unclosed client: its threads are joined
  // without the GIL, so that other Python threads run meanwhile.
  ~PyClient() { Close(); }
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  std::optional<py::bytes> Get(const py::handle& key) {
    std::optional<std::string> value = GetString(key);
    if (!value) return std::nullopt;
    return ToBytes(*value);
  }

  std::optional<py::object> GetView(const py::handle& key) {
    std::optional<std::string> value = GetString(key);
    if (!value) return std::nullopt;
    py::object holder = py::cast(Value{std::move(*value)});
    PyObject* view = PyMemoryView_FromObject(holder.ptr());
    if (view == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(view);
  }

  void Put(const py::handle& key, const py::handle& value) {
    Bytes k(key), v(value);
    Check(Run([&](rkv::Client& c) { return c.Put(k.view(), v.view()); }), true);
  }

  bool Insert(const py::handle& key, const py::handle& value) {
    Bytes k(key), v(value);
    absl::Status s = Run([&](rkv::Client& c) { return c.Insert(k.view(), v.view()); });
    if (absl::IsAlreadyExists(s)) return false;
    Check(std::move(s), true);
    return true;
  }

  bool Delete(const py::handle& key) {
    Bytes k(key);
    absl::Status s = Run([&](rkv::Client& c) { return c.Delete(k.view()); });
    if (absl::IsNotFound(s)) return false;
    Check(std::move(s), true);
    return true;
  }

  py::list GetMany(const py::object& keys) {
    RefuseOneKey(keys, "get_many takes an iterable of keys");
    std::vector<Bytes> k;
    for (py::handle key : keys) k.emplace_back(key);
    auto results = Batch<absl::StatusOr<std::string>>(
        k.size(), [&](rkv::Client& c, size_t i, rkv::Client::GetCallback done) {
          c.GetAsync(k[i].view(), std::move(done));
        });
    py::list out(results->size());
    for (size_t i = 0; i < results->size(); ++i) {
      const absl::StatusOr<std::string>& r = (*results)[i];
      if (r.ok()) {
        out[i] = ToBytes(*r);
      } else if (absl::IsNotFound(r.status())) {
        out[i] = py::none();
      } else {
        throw StatusError{r.status()};
      }
    }
    return out;
  }

  void PutMany(const py::object& items) {
    RefuseOneKey(items, "put_many takes a mapping or an iterable of (key, value) pairs");
    py::object pairs = py::hasattr(items, "items") ? items.attr("items")() : items;
    std::vector<std::pair<Bytes, Bytes>> kv;
    for (py::handle item : pairs) {
      if (!py::isinstance<py::tuple>(item) && !py::isinstance<py::list>(item)) {
        throw py::type_error("rkv: put_many takes (key, value) pairs (tuples or lists)");
      }
      auto pair = py::reinterpret_borrow<py::sequence>(item);
      if (pair.size() != 2) throw py::value_error("rkv: put_many takes (key, value) pairs");
      kv.emplace_back(Bytes(pair[0]), Bytes(pair[1]));
    }
    auto results = Batch<absl::Status>(
        kv.size(), [&](rkv::Client& c, size_t i, rkv::Client::DoneCallback done) {
          c.PutAsync(kv[i].first.view(), kv[i].second.view(), std::move(done));
        });
    for (absl::Status& s : *results) Check(std::move(s), true);
  }

  py::dict Stats() {
    static constexpr const char* kNames[rkv::kOpTypes] = {"get", "put", "insert", "delete"};
    static constexpr const char* kOutcomes[rkv::kOpOutcomes] = {"ok", "not_found", "already_exists",
                                                                "unavailable", "failed"};
    rkv::OpCosts costs[rkv::kOpTypes];
    rkv::OpStats stats[rkv::kOpTypes];
    Run([&](rkv::Client& c) {
      for (int t = 0; t < rkv::kOpTypes; ++t) {
        costs[t] = c.costs(static_cast<rkv::OpType>(t));
        stats[t] = c.stats(static_cast<rkv::OpType>(t));
      }
    });
    py::dict out;
    for (int t = 0; t < rkv::kOpTypes; ++t) {
      const rkv::OpCosts& c = costs[t];
      py::dict d;
      d["ops"] = c.ops;
      d["round_trips"] = c.round_trips;
      d["requests"] = c.requests;
      d["bytes"] = c.bytes;
      d["retries"] = c.retries;
      py::dict outcomes;
      for (int o = 0; o < rkv::kOpOutcomes; ++o) outcomes[kOutcomes[o]] = stats[t].outcomes[o];
      d["outcomes"] = outcomes;
      py::list buckets;
      for (int b = 0; b < rkv::kLatencyBuckets; ++b) {
        buckets.append(py::make_tuple(absl::ToDoubleSeconds(rkv::LatencyBucketBound(b)),
                                      stats[t].latency_buckets[b]));
      }
      d["latency_buckets"] = buckets;
      d["latency_sum_seconds"] = absl::ToDoubleSeconds(stats[t].latency_sum);
      out[kNames[t]] = d;
    }
    return out;
  }

  void Close() {
    py::gil_scoped_release release;  // Closing joins the client's threads.
    std::lock_guard<std::mutex> lock(mu_);
    client_.reset();
  }

  bool closed() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    return client_ == nullptr;
  }

 private:
  std::optional<std::string> GetString(const py::handle& key) {
    Bytes k(key);
    absl::StatusOr<std::string> value = absl::InternalError("not run");
    Run([&](rkv::Client& c) { value = c.Get(k.view()); });
    if (absl::IsNotFound(value.status())) return std::nullopt;
    Check(value.status(), false);
    return std::move(*value);
  }

  // Runs `fn` on the client with the GIL released and the client's lock
  // held, and returns what it returns. Its callbacks write only to C++
  // objects: none needs the GIL.
  template <typename Fn>
  auto Run(Fn&& fn) -> std::invoke_result_t<Fn, rkv::Client&> {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    // Thrown without the GIL: the exception holds a C++ string only, and
    // becomes a Python one once the GIL is back.
    if (client_ == nullptr) throw py::value_error("rkv: the client is closed");
    return fn(*client_);
  }

  static void Drain(rkv::Client& c) {
    while (c.in_flight() > 0) c.Poll(absl::Seconds(1));
  }

  // Starts operation i of n with submit(client, i, callback) and waits for
  // all, handing the client at most window_ at a time (the rest of a large
  // batch waits here, not as copies queued in the client). The results are
  // shared with the callbacks, so that an exception midway (out of memory)
  // leaves no callback to write into a frame that is gone; what was started
  // is drained before it goes on.
  template <typename Result, typename Submit>
  std::shared_ptr<std::vector<Result>> Batch(size_t n, Submit&& submit) {
    auto results = std::make_shared<std::vector<Result>>(n, Result(absl::InternalError("not run")));
    Run([&](rkv::Client& c) {
      try {
        for (size_t i = 0; i < n; ++i) {
          while (c.in_flight() >= window_) c.Poll(absl::Seconds(1));
          submit(c, i, [results, i](Result r) { (*results)[i] = std::move(r); });
        }
      } catch (...) {
        Drain(c);
        throw;
      }
      Drain(c);
    });
    return results;
  }

  // A str or a buffer is one key, not an iterable of them (a str would
  // iterate its characters).
  static void RefuseOneKey(const py::object& o, const char* what) {
    if (py::isinstance<py::str>(o) || PyObject_CheckBuffer(o.ptr())) {
      throw py::type_error(absl::StrCat("rkv: ", what, ", not a single str or bytes-like object"));
    }
  }

  size_t window_;  // Operations a batch hands the client at once.
  std::mutex mu_;
  std::unique_ptr<rkv::Client> client_;  // Null once closed.
};

}  // namespace

PYBIND11_MODULE(_rkv, m) {
  m.doc() = "rkv's client library (use the package rkv, which re-exports it)";

  exceptions = new Exceptions();
  py::object exception = py::module_::import("builtins").attr("Exception");
  exceptions->error = NewException(
      m, "Error", exception,
      "An operation failed. `code` names the status (e.g. 'UNAVAILABLE'); the subclasses "
      "below are the ones a program usually handles.");
  exceptions->unavailable = NewException(
      m, "Unavailable", exceptions->error,
      "A server could not be reached, or the operation failed on its way there or back. A "
      "write's outcome is unknown: it may or may not take effect, now or later. A GET may be "
      "retried; retry a write only if applying it twice is harmless.");
  exceptions->invalid_argument = NewException(
      m, "InvalidArgument",
      py::make_tuple(exceptions->error, py::module_::import("builtins").attr("ValueError")),
      "A key or value the store cannot take: an empty or over 1 KiB key, a value over 1 MiB.");
  exceptions->resource_exhausted =
      NewException(m, "ResourceExhausted", exceptions->error,
                   "A server's index or heap is full: the write did not take effect.");
  exceptions->permission_denied =
      NewException(m, "PermissionDenied", exceptions->error,
                   "The cluster refused this client: a wrong or missing token.");
  exceptions->timeout = NewException(
      m, "Timeout",
      py::make_tuple(exceptions->error, py::module_::import("builtins").attr("TimeoutError")),
      "The coordinator did not answer in time.");

  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      Raise(e);
    }
  });

  py::class_<Value>(m, "_Value", py::buffer_protocol()).def_buffer([](Value& v) {
    return py::buffer_info(v.bytes.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                           {static_cast<py::ssize_t>(v.bytes.size())}, {1},
                           /*readonly=*/true);
  });

  py::class_<PyClient>(m, "_Client")
      .def(py::init([](const std::string& coordinator, std::optional<std::string> token,
                       const std::string& fabric, const std::string& rdma_device,
                       uint32_t max_outstanding, size_t cache_entries) {
             rkv::ClientOptions options;
             options.fabric_kind = fabric;
             options.rdma_device = rdma_device;
             options.max_outstanding = max_outstanding;
             options.cache_entries = cache_entries;
             return std::make_unique<PyClient>(coordinator, token, options);
           }),
           py::arg("coordinator"), py::arg("token"), py::arg("fabric"), py::arg("rdma_device"),
           py::arg("max_outstanding"), py::arg("cache_entries"))
      .def("get", &PyClient::Get)
      .def("get_view", &PyClient::GetView)
      .def("put", &PyClient::Put)
      .def("insert", &PyClient::Insert)
      .def("delete", &PyClient::Delete)
      .def("get_many", &PyClient::GetMany)
      .def("put_many", &PyClient::PutMany)
      .def("stats", &PyClient::Stats)
      .def("close", &PyClient::Close)
      .def_property_readonly("closed", &PyClient::closed);
}
