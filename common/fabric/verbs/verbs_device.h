// The device and protection domain that the verbs backend's control path
// (verbs_connect.h) and data path (verbs_fabric.cc) share, and how errors
// name them.
#ifndef RKV_COMMON_FABRIC_VERBS_VERBS_DEVICE_H_
#define RKV_COMMON_FABRIC_VERBS_VERBS_DEVICE_H_

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace rkv::fabric {

// Outstanding READs/atomics asked for; capped by what the device supports.
constexpr int kWantRdAtomic = 16;

inline std::string ErrnoText(int err) { return std::strerror(err); }

// The cm id's device, named for error messages.
inline std::string DeviceName(const rdma_cm_id* id) {
  return id->verbs != nullptr ? ibv_get_device_name(id->verbs->device) : "none";
}

// Completion and event channels are drained without blocking once poll
// says they are ready: another waiter may have taken the event.
inline void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// The device and protection domain every region and queue pair of one
// Fabric shares; kept alive by each of them. The context is librdmacm's own
// (rdma_get_devices), the one its cm ids carry: a context from
// ibv_open_device would be another object for the same device, and
// rdma_create_qp refuses a protection domain of another context.
class VerbsDevice {
 public:
  VerbsDevice(ibv_context* ctx, ibv_pd* pd, const ibv_device_attr& attr, std::string name)
      : ctx_(ctx), pd_(pd), attr_(attr), name_(std::move(name)) {}
  ~VerbsDevice() { ibv_dealloc_pd(pd_); }  // librdmacm owns the context.
  ibv_context* ctx() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  const ibv_device_attr& attr() const { return attr_; }
  const std::string& name() const { return name_; }
  int rd_atomic_initiator() const { return std::min(kWantRdAtomic, attr_.max_qp_init_rd_atom); }
  int rd_atomic_responder() const { return std::min(kWantRdAtomic, attr_.max_qp_rd_atom); }

 private:
  ibv_context* const ctx_;
  ibv_pd* const pd_;
  const ibv_device_attr attr_;
  const std::string name_;
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_VERBS_VERBS_DEVICE_H_
