// Which sanitizer instruments this test build: tests run the same checks on fewer cases
// under sanitizers (their builds are several times slower), and skip what a sanitizer
// cannot run (fork under ThreadSanitizer). KVTIER_TEST_THREAD_SANITIZER and
// KVTIER_TEST_ADDRESS_SANITIZER are defined (1) for the preprocessor too.
#ifndef KVTIER_TESTS_TESTING_SANITIZERS_H_
#define KVTIER_TESTS_TESTING_SANITIZERS_H_

#if defined(__SANITIZE_THREAD__)
#define KVTIER_TEST_THREAD_SANITIZER 1
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KVTIER_TEST_ADDRESS_SANITIZER 1
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(KVTIER_TEST_THREAD_SANITIZER)
#define KVTIER_TEST_THREAD_SANITIZER 1
#endif
#if __has_feature(address_sanitizer) && !defined(KVTIER_TEST_ADDRESS_SANITIZER)
#define KVTIER_TEST_ADDRESS_SANITIZER 1
#endif
#endif

namespace kvtier::testing {

#ifdef KVTIER_TEST_THREAD_SANITIZER
inline constexpr bool kThreadSanitized = true;
#else
inline constexpr bool kThreadSanitized = false;
#endif
#ifdef KVTIER_TEST_ADDRESS_SANITIZER
inline constexpr bool kAddressSanitized = true;
#else
inline constexpr bool kAddressSanitized = false;
#endif
inline constexpr bool kSanitized = kThreadSanitized || kAddressSanitized;

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_SANITIZERS_H_
