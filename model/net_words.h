// The words a network fault puts into an iptables or tc command line, checked alike where a
// scenario or an inventory is read (model/inventory.cc, harness/validator_faults.cc), where the
// agent reads a request (model/agent_protocol.cc), and on `mwchaos agent --dev`.
#pragma once

#include <string_view>

namespace mw::harness {

// Whether `dev` is a network interface name: 1 to 15 letters, digits, _ . -, neither "." nor
// "..", no leading '-'.
bool isInterfaceName(std::string_view dev);

// Whether `rate` is a tc rate: a number (digits, at most one '.') and a unit of letters ("10mbit",
// "1.5gbit", "800kbps") or '%' (of the interface's speed). Whether tc knows the unit is tc's to
// say (the fault fails with its words).
bool isTcRate(std::string_view rate);

// Whether `peer` is a plain host name or address (letters, digits, _ . : % [ ] - /): what a cut
// names as its destination.
bool isPeerWord(std::string_view peer);

}  // namespace mw::harness
