// The durable part of a scheduler's state, as bytes to compare: a change of
// them must be written before any answer reveals it (scheduler/
// scheduler_service.h). Derived from the message itself, so a field added
// to SchedulerState is durable without a word here.
#ifndef PSTRAIN_SCHEDULER_DURABLE_KEY_H_
#define PSTRAIN_SCHEDULER_DURABLE_KEY_H_

#include <string>

#include "proto/scheduler_state.pb.h"

namespace pstrain {

// `state`'s deterministic serialization without the fields marked
// [(resent_by_members) = true] (at any depth): the clock table and the
// members' last reports, which the members tell a scheduler again.
std::string DurableKeyOf(SchedulerState state);

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_DURABLE_KEY_H_
