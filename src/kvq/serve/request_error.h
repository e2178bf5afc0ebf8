// A request the server refuses: the HTTP status and what an OpenAI client reads in its error
// object ({"error": {"message", "type", "param", "code"}}). Thrown by request parsing and by the
// scheduler's admission; the HTTP glue turns it into the response.
#pragma once

#include <string>
#include <utility>

#include "kvq/core/error.h"

namespace kvq::serve {

class RequestError : public Error {
 public:
  // `param`: the request field at fault ("" when none); `type`: OpenAI's error type
  // ("invalid_request_error", "rate_limit_error", "server_error", ...).
  RequestError(int status, std::string message, std::string param = {},
               std::string type = "invalid_request_error")
      : Error(std::move(message)),
        status_(status),
        param_(std::move(param)),
        type_(std::move(type)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string param_, type_;
};

}  // namespace kvq::serve
