// Placeholder so that a library folder without sources still builds.
namespace kvq {
void kvq_empty_translation_unit() {}
}  // namespace kvq
