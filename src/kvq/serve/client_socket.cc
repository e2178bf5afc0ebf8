#include "kvq/serve/client_socket.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <memory>

namespace kvq::serve {

namespace {

bool peer_is(int fd, const std::string& addr, int port) {
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return false;
  int peer_port = -1;
  if (peer.ss_family == AF_INET) {
    peer_port = ntohs(reinterpret_cast<const sockaddr_in*>(&peer)->sin_port);
  } else if (peer.ss_family == AF_INET6) {
    peer_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_port);
  } else {
    return false;
  }
  if (peer_port != port) return false;
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&peer), len, host, sizeof(host), nullptr, 0,
                    NI_NUMERICHOST) != 0) {
    return false;
  }
  return addr == host;
}

}  // namespace

int find_client_socket(const std::string& remote_addr, int remote_port) {
  if (remote_addr.empty() || remote_port < 0) return -1;
  const std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir("/proc/self/fd"), ::closedir);
  if (!dir) return -1;
  while (const dirent* e = ::readdir(dir.get())) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;  // "." and ".."
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (peer_is(static_cast<int>(fd), remote_addr, remote_port)) return static_cast<int>(fd);
  }
  return -1;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace kvq::serve
