#include "scheduler/durable_key.h"

#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace pstrain {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void ClearResent(Message* m) {
  const Reflection* r = m->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(*m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->options().GetExtension(resent_by_members)) {
      r->ClearField(m, f);
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(*m, f); ++i) ClearResent(r->MutableRepeatedMessage(m, f, i));
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      ClearResent(r->MutableMessage(m, f));
    }
  }
}

}  // namespace

std::string DurableKeyOf(SchedulerState state) {
  ClearResent(&state);
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    state.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace pstrain
