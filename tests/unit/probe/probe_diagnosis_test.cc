// The HTTP-free parts of `mla probe`: base URL parsing, the key described without its value, one
// diagnosis per failure from hand-written answers (the e2e test, tests/e2e/server/probe_test.py,
// drives the same cases over real sockets), and the token comparison of --compare.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "probe/probe_compare.h"
#include "probe/probe_diagnosis.h"

namespace {

using namespace mla::probe;

constexpr const char* kKey = "sk-secret-0123456789";

std::string all_text(const Report& r) {
  std::string s = r.summary;
  for (const std::string& d : r.details) s += "\n" + d;
  return s;
}

ProbeRequest request(const char* url = "http://127.0.0.1:8080", const char* key = kKey) {
  ProbeRequest q;
  q.base = *parse_base_url(url);
  q.route = "/v1/chat/completions";
  q.model = "tiny-v3";
  q.key = describe_key("MLA_API_KEY", key);
  return q;
}

Observed answer(int status, std::string body, std::string content_type = "application/json") {
  Observed o;
  o.status = status;
  o.body = std::move(body);
  o.content_type = std::move(content_type);
  o.latency_ms = 12.5;
  return o;
}

Report diagnose_simple(const ProbeRequest& q, const Observed& o, const ModelList& models = {},
                       const ModelList& root = {}) {
  return diagnose(q, o, models, root, kKey);
}

TEST(ProbeBaseUrl, AcceptsWithAndWithoutV1) {
  for (const char* u : {"http://127.0.0.1:8080", "http://127.0.0.1:8080/",
                        "http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/"}) {
    auto b = parse_base_url(u);
    ASSERT_TRUE(b.ok()) << u;
    EXPECT_EQ(b->origin, "http://127.0.0.1:8080");
    EXPECT_EQ(b->prefix, "");
    EXPECT_EQ(b->host, "127.0.0.1");
    EXPECT_EQ(b->port, 8080);
    EXPECT_FALSE(b->doubled_v1);
    EXPECT_EQ(b->url("/v1/models"), "http://127.0.0.1:8080/v1/models");
  }
}

TEST(ProbeBaseUrl, PrefixesPortsAndDoubledV1) {
  auto d = parse_base_url("http://h:9/v1/v1");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->doubled_v1);
  EXPECT_EQ(d->prefix, "/v1");
  EXPECT_EQ(d->url("/v1/chat/completions"), "http://h:9/v1/v1/chat/completions");
  EXPECT_EQ(suggested_base(*d).url("/v1"), "http://h:9/v1");
  auto pd = parse_base_url("http://h:9/proxy/v1/v1/");
  ASSERT_TRUE(pd.ok());
  EXPECT_TRUE(pd->doubled_v1);
  EXPECT_EQ(suggested_base(*pd).url("/v1/models"), "http://h:9/proxy/v1/models");
  auto p = parse_base_url("https://example.com/proxy/v1");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->port, 443);
  EXPECT_EQ(p->prefix, "/proxy");
  EXPECT_FALSE(p->doubled_v1);
  EXPECT_EQ(suggested_base(*p).url("/v1"), "https://example.com/v1");
  EXPECT_EQ(parse_base_url("http://example.com")->port, 80);
  auto v6 = parse_base_url("http://[::1]:8080/v1");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 8080);
  EXPECT_EQ(v6->origin, "http://[::1]:8080");
}

TEST(ProbeBaseUrl, RefusesWhatNoClientCouldUse) {
  for (const char* u :
       {"127.0.0.1:8080", "ftp://h/v1", "http://:80", "http://h:abc", "http://h:", "http://h:70000",
        "http://h/v1?x=1", "http://user:pw@h/v1", "http://[::1"}) {
    auto b = parse_base_url(u);
    EXPECT_FALSE(b.ok()) << u;
    if (!b.ok()) {
      EXPECT_NE(b.status().message().find(u), std::string::npos) << u;
    }
  }
}

TEST(ProbeKey, DescribedWithoutItsValue) {
  EXPECT_EQ(describe_key("MLA_API_KEY", nullptr).describe(), "MLA_API_KEY is unset");
  EXPECT_EQ(describe_key("MLA_API_KEY", "").describe(), "MLA_API_KEY is empty");
  const KeySource k = describe_key("MY_KEY", kKey);
  EXPECT_EQ(k.describe(), "MY_KEY (20 characters)");
  EXPECT_TRUE(k.sendable());
  EXPECT_FALSE(k.edge_whitespace || k.line_break || k.bearer_prefix);
  const KeySource n = describe_key("K", "abc\n");
  EXPECT_TRUE(n.line_break && n.edge_whitespace);
  EXPECT_FALSE(n.sendable());
  EXPECT_TRUE(describe_key("K", " abc").edge_whitespace);
  EXPECT_TRUE(describe_key("K", "Bearer abc").bearer_prefix);
  EXPECT_FALSE(describe_key("K", nullptr).sendable());
}

TEST(ProbeDiagnose, Reachability) {
  Observed refused;
  refused.connect_failed = true;
  refused.transport_error = "Connection";
  Report r = diagnose_simple(request("http://127.0.0.1:9/v1"), refused);
  EXPECT_EQ(r.diagnosis, Diagnosis::kUnreachable);
  EXPECT_EQ(exit_code(r.diagnosis), 2);
  EXPECT_NE(r.summary.find("127.0.0.1:9"), std::string::npos);
  EXPECT_NE(r.summary.find("connection refused"), std::string::npos);
  Observed unknown;
  unknown.host_unknown = true;
  r = diagnose_simple(request("http://no-such-host.invalid:1"), unknown);
  EXPECT_EQ(r.diagnosis, Diagnosis::kUnreachable);
  EXPECT_NE(r.summary.find("no-such-host.invalid"), std::string::npos);
  Observed cut;
  cut.transport_error = "Read";
  EXPECT_NE(diagnose_simple(request(), cut).summary.find("Read"), std::string::npos);
}

TEST(ProbeDiagnose, UnauthorizedNamesTheVariableNeverTheKey) {
  const std::string body = std::string(R"({"error":{"message":"incorrect API key provided: )") +
                           kKey + R"(","type":"authentication_error","code":"invalid_api_key"}})";
  Report r = diagnose_simple(request(), answer(401, body));
  EXPECT_EQ(r.diagnosis, Diagnosis::kUnauthorized);
  const std::string text = all_text(r);
  EXPECT_NE(text.find("MLA_API_KEY"), std::string::npos);
  EXPECT_NE(text.find("20 characters"), std::string::npos);
  EXPECT_NE(text.find("incorrect API key provided"), std::string::npos);
  EXPECT_EQ(text.find(kKey), std::string::npos) << text;

  r = diagnose(request("http://h:1", nullptr), answer(401, R"({"error":{"message":"missing"}})"),
               {}, {}, "");
  EXPECT_EQ(r.diagnosis, Diagnosis::kUnauthorized);
  EXPECT_NE(all_text(r).find("MLA_API_KEY is unset"), std::string::npos);
  EXPECT_NE(all_text(r).find("no Authorization header"), std::string::npos);

  ProbeRequest fb = request("http://h:1", "Bearer x ");
  fb.key.env_name = "OPENAI_API_KEY";
  fb.key.fallback_from = "MLA_API_KEY";
  r = diagnose(fb, answer(403, "{}"), {}, {}, "Bearer x ");
  EXPECT_EQ(r.diagnosis, Diagnosis::kUnauthorized);
  EXPECT_NE(all_text(r).find("MLA_API_KEY is unset or empty, so OPENAI_API_KEY"),
            std::string::npos);
  EXPECT_NE(all_text(r).find("\"Bearer \""), std::string::npos);
  EXPECT_NE(all_text(r).find("whitespace"), std::string::npos);
}

TEST(ProbeDiagnose, KeyWithALineBreakIsNotSent) {
  const Report r = diagnose(request("http://h:1", "sk-1\n"), Observed{}, {}, {}, "sk-1\n");
  EXPECT_EQ(r.diagnosis, Diagnosis::kUnauthorized);
  EXPECT_NE(all_text(r).find("line break"), std::string::npos);
}

TEST(ProbeDiagnose, UnknownModelListsTheServedIds) {
  const ModelList models =
      parse_model_list(200, R"({"object":"list","data":[{"id":"Tiny-V3"},{"id":"other"}]})");
  ASSERT_TRUE(models.fetched);
  const Report r =
      diagnose_simple(request(),
                      answer(404, R"({"error":{"message":"The model `tiny-v3` does not exist.",)"
                                  R"("code":"model_not_found"}})"),
                      models);
  EXPECT_EQ(r.diagnosis, Diagnosis::kModelNotFound);
  EXPECT_EQ(exit_code(r.diagnosis), 4);
  EXPECT_NE(all_text(r).find("Tiny-V3, other"), std::string::npos);
  EXPECT_NE(all_text(r).find("did you mean --model Tiny-V3"), std::string::npos);
  // vLLM-style: no code, but the listing does not have the model.
  const Report v = diagnose_simple(request(), answer(404, R"({"detail":"Not Found"})"), models);
  EXPECT_EQ(v.diagnosis, Diagnosis::kModelNotFound);
}

TEST(ProbeDiagnose, DoubledV1AndWrongPaths) {
  const ModelList none = parse_model_list(404, R"({"error":{"message":"no route"}})");
  EXPECT_FALSE(none.fetched);
  const ModelList root = parse_model_list(200, R"({"data":[{"id":"tiny-v3"}]})");
  Report r = diagnose_simple(request("http://h:1/v1/v1"),
                             answer(404, R"({"error":{"message":"no route POST /v1/v1/chat"}})"),
                             none, root);
  EXPECT_EQ(r.diagnosis, Diagnosis::kDoubledV1);
  EXPECT_NE(r.summary.find("/v1/v1"), std::string::npos);
  EXPECT_NE(all_text(r).find("--base-url http://h:1/v1 "), std::string::npos) << all_text(r);

  r = diagnose_simple(request("http://h:1/api"), answer(404, "{}"), none, root);
  EXPECT_EQ(r.diagnosis, Diagnosis::kWrongPath);
  EXPECT_NE(all_text(r).find("try --base-url http://h:1/v1"), std::string::npos);

  r = diagnose_simple(request(), answer(404, "{}"), root);
  EXPECT_EQ(r.diagnosis, Diagnosis::kWrongPath);
  EXPECT_NE(all_text(r).find("--completions"), std::string::npos);

  // A plain web server: 404 HTML, no /v1 anywhere.
  Observed html = answer(404, "<html><title>404 Not Found</title></html>", "text/html");
  html.server = "nginx/1.24.0";
  r = diagnose_simple(request(), html, none, none);
  EXPECT_EQ(r.diagnosis, Diagnosis::kWrongPath);
  EXPECT_NE(all_text(r).find("answered by Server: nginx/1.24.0"), std::string::npos);
}

TEST(ProbeDiagnose, ProxyAnswersAreReportedWithWhatAnswered) {
  Observed o = answer(502, "<html><head><title>502 Bad Gateway</title></head></html>", "text/html");
  o.server = "nginx";
  o.via = "1.1 edge";
  Report r = diagnose_simple(request(), o);
  EXPECT_EQ(r.diagnosis, Diagnosis::kProxy);
  EXPECT_EQ(exit_code(r.diagnosis), 7);
  EXPECT_NE(r.summary.find("Server: nginx, Via: 1.1 edge"), std::string::npos);
  EXPECT_EQ(r.answered_by, "Server: nginx, Via: 1.1 edge");
  EXPECT_NE(all_text(r).find("\"502 Bad Gateway\""), std::string::npos);
  // A 200 that is a web page is no model's answer either.
  r = diagnose_simple(request(), answer(200, "<!doctype html><p>login</p>", "text/html"));
  EXPECT_EQ(r.diagnosis, Diagnosis::kProxy);
  // 504 even with a JSON body is a gateway's word.
  EXPECT_EQ(diagnose_simple(request(), answer(504, R"({"message":"timeout"})")).diagnosis,
            Diagnosis::kProxy);
}

TEST(ProbeDiagnose, RedirectsNameTheirTarget) {
  Observed o = answer(301, "", "text/html");
  o.location = "https://h/v1/chat/completions";
  const Report r = diagnose_simple(request("http://h"), o);
  EXPECT_EQ(r.diagnosis, Diagnosis::kWrongPath);
  EXPECT_NE(r.summary.find("redirect to https://h/v1/chat/completions"), std::string::npos);
}

TEST(ProbeDiagnose, AnEchoedKeyIsMasked) {
  const Observed o =
      answer(200, std::string(R"({"echo":{"authorization":"Bearer )") + kKey + R"("}})");
  const Report r = diagnose_simple(request(), o);
  EXPECT_EQ(r.diagnosis, Diagnosis::kNoChoices);
  EXPECT_EQ(all_text(r).find(kKey), std::string::npos);
  EXPECT_NE(all_text(r).find("Bearer ***"), std::string::npos);
}

TEST(ProbeDiagnose, OtherErrorsQuoteTheServer) {
  Report r = diagnose_simple(request(),
                             answer(503, R"({"error":{"message":"the model is still loading"}})"));
  EXPECT_EQ(r.diagnosis, Diagnosis::kHttpError);
  EXPECT_NE(r.summary.find("still loading"), std::string::npos);
  EXPECT_NE(all_text(r).find("retry"), std::string::npos);
  r = diagnose_simple(request(), answer(400, R"({"error":{"message":"max_tokens must be > 0"}})"));
  EXPECT_EQ(r.diagnosis, Diagnosis::kHttpError);
  EXPECT_NE(r.summary.find("max_tokens must be > 0"), std::string::npos);
}

TEST(ProbeDiagnose, BodyWithoutChoicesIsPrintedCut) {
  const std::string body =
      R"({"id":"x","object":"chat.completion","note":")" + std::string(5000, 'a') + R"("})";
  Report r = diagnose_simple(request(), answer(200, body));
  EXPECT_EQ(r.diagnosis, Diagnosis::kNoChoices);
  EXPECT_EQ(exit_code(r.diagnosis), 8);
  const std::string text = all_text(r);
  EXPECT_NE(text.find(R"(raw body: {"id":"x","object":"chat.completion")"), std::string::npos);
  EXPECT_NE(text.find("more bytes]"), std::string::npos);
  EXPECT_LT(text.size(), 1500u);
  r = diagnose_simple(request(), answer(200, R"({"choices":[]})"));
  EXPECT_EQ(r.diagnosis, Diagnosis::kNoChoices);
  r = diagnose_simple(request(), answer(200, R"({"error":{"message":"upstream failed"}})"));
  EXPECT_EQ(r.diagnosis, Diagnosis::kNoChoices);
  EXPECT_NE(all_text(r).find("upstream failed"), std::string::npos);
}

TEST(ProbeDiagnose, RepliesOfBothEndpoints) {
  Report r = diagnose_simple(
      request(), answer(200, R"({"choices":[{"message":{"role":"assistant","content":"Hi!"}}]})"));
  EXPECT_EQ(r.diagnosis, Diagnosis::kOk);
  EXPECT_EQ(exit_code(r.diagnosis), 0);
  EXPECT_EQ(r.reply, "Hi!");
  EXPECT_NE(r.summary.find("12.5 ms"), std::string::npos);
  r = diagnose_simple(request(), answer(200, R"({"choices":[{"text":" Paris"}]})"));
  EXPECT_EQ(r.reply, " Paris");
  r = diagnose_simple(request(), answer(200, R"({"choices":[{"message":{"content":null}}]})"));
  EXPECT_EQ(r.diagnosis, Diagnosis::kOk);
  EXPECT_EQ(r.reply, "");
}

// OpenAI SDKs append the route to base_url as given: a URL that works only because the probe
// added /v1 gets a warning with the URL to give them.
TEST(ProbeDiagnose, BaseUrlWithoutV1IsAWarning) {
  const std::string body = R"({"choices":[{"message":{"content":"Hi!"}}]})";
  Report r = diagnose_simple(request("http://127.0.0.1:8080"), answer(200, body));
  EXPECT_EQ(r.diagnosis, Diagnosis::kOk);
  EXPECT_NE(all_text(r).find("give the openai SDK base_url=\"http://127.0.0.1:8080/v1\""),
            std::string::npos)
      << all_text(r);
  EXPECT_NE(all_text(r).find("http://127.0.0.1:8080/chat/completions"), std::string::npos);
  r = diagnose_simple(request("http://127.0.0.1:8080/proxy/v1"), answer(200, body));
  EXPECT_TRUE(r.details.empty()) << all_text(r);
}

// A listener that takes the request and never answers, a connect timeout and a cut connection
// are three different stories.
TEST(ProbeDiagnose, SilentListenerConnectTimeoutAndCut) {
  Observed o;
  o.timed_out = o.silent = true;
  o.transport_error = "Failed to read connection";
  EXPECT_NE(diagnose_simple(request(), o).summary.find("accepted the connection and the request"),
            std::string::npos);
  o.silent = false;
  o.transport_error = "Connection timed out";
  EXPECT_NE(diagnose_simple(request(), o).summary.find("no connection to 127.0.0.1:8080"),
            std::string::npos);
  o.timed_out = false;
  o.transport_error = "Failed to read connection";
  EXPECT_NE(diagnose_simple(request(), o).summary.find("failed before a response"),
            std::string::npos);
}

TEST(ProbeText, ExcerptAndRedact) {
  EXPECT_EQ(excerpt("short", 10), "short");
  EXPECT_EQ(excerpt("abcdef", 3), "abc... [3 more bytes]");
  // "é" is two bytes: a cut inside it backs up to before it.
  EXPECT_EQ(excerpt("a\xC3\xA9z", 2), "a... [3 more bytes]");
  EXPECT_EQ(excerpt("a\nb\x1b[2J", 100), "a\\nb\\x1b[2J");  // one line, no terminal escapes
  EXPECT_EQ(redact("key=k1 and k1", "k1"), "key=*** and ***");
  EXPECT_EQ(redact("nothing", ""), "nothing");
}

TEST(ProbeCompare, ParsesCompletionTokens) {
  auto e = parse_completion_tokens(
      R"({"choices":[{"text":" a b","finish_reason":"length",)"
      R"("logprobs":{"tokens":[" a"," b"]}}],"usage":{"completion_tokens":2}})");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->text, " a b");
  EXPECT_TRUE(e->has_tokens);
  EXPECT_EQ(e->tokens, (std::vector<std::string>{" a", " b"}));
  EXPECT_EQ(e->finish_reason, "length");
  EXPECT_EQ(e->completion_tokens, 2);
  EXPECT_FALSE(parse_completion_tokens(R"({"choices":[]})").ok());
  EXPECT_FALSE(parse_completion_tokens("<html>").ok());
}

TEST(ProbeCompare, ByIdsTextsAndText) {
  const std::vector<int32_t> ids = {5, 6, 7};
  const std::vector<std::string> bytes = {" a", " b", "\xE4"};  // the last: part of a character
  EndpointTokens e;
  e.has_tokens = true;
  e.tokens = {"token_id:5", "token_id:6", "token_id:7"};
  Agreement a = compare_tokens(ids, bytes, e);
  EXPECT_TRUE(a.full);
  EXPECT_EQ(a.method, "token ids");
  EXPECT_EQ(a.agreed, 3u);

  e.tokens = {" a", " b", "\xEF\xBF\xBD"};  // our server's JSON: U+FFFD for the lone byte
  a = compare_tokens(ids, bytes, e);
  EXPECT_TRUE(a.full) << a.agreed;
  EXPECT_EQ(a.method, "token texts");

  e.tokens = {" a", " c", " d", " e"};
  a = compare_tokens(ids, bytes, e);
  EXPECT_FALSE(a.full);
  EXPECT_EQ(a.agreed, 1u);
  EXPECT_EQ(a.total, 4u);
  EXPECT_EQ(a.endpoint_token, " c");
  EXPECT_EQ(a.local_token, " b");

  EndpointTokens t;
  t.text = " a b\xEF\xBF\xBD";
  t.completion_tokens = 3;
  a = compare_tokens(ids, bytes, t);
  EXPECT_EQ(a.method, "text");
  EXPECT_TRUE(a.full);
  t.text = " a bz";
  a = compare_tokens(ids, bytes, t);
  EXPECT_FALSE(a.full);
  EXPECT_EQ(a.agreed, 2u);
  EXPECT_EQ(a.endpoint_token, "z");
}

// The gap at the first divergence, from the endpoint's top logprobs and the local logprobs.
TEST(ProbeCompare, GapAtTheDivergence) {
  auto e = parse_completion_tokens(
      R"({"choices":[{"text":"xy","logprobs":{"tokens":["token_id:5","token_id:9"],)"
      R"("token_logprobs":[-0.1,-0.7],"top_logprobs":[{"token_id:5":-0.1},)"
      R"({"token_id:9":-0.7,"token_id:6":-0.9}]}}]})");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->top.size(), 2u);
  EXPECT_EQ(e->token_logprobs, (std::vector<double>{-0.1, -0.7}));
  const std::vector<int32_t> ids = {5, 6};
  const std::vector<std::string> bytes = {"x", "z"};
  // Local log-softmax rows over a vocabulary of 10: at step 1 it prefers 6 over 9 by 0.3.
  std::vector<std::vector<float>> rows(2, std::vector<float>(10, -5.0f));
  rows[1][6] = -0.5f;
  rows[1][9] = -0.8f;
  const Agreement a = compare_tokens(
      ids, bytes, *e, [&](size_t k, int32_t id) { return double(rows[k][size_t(id)]); });
  EXPECT_EQ(a.agreed, 1u);
  EXPECT_NEAR(a.endpoint_gap, 0.2, 1e-12);  // -0.7 − (−0.9)
  EXPECT_NEAR(a.local_gap, 0.3, 1e-6);
  // Without top logprobs or rows the gaps stay unknown.
  EndpointTokens bare;
  bare.has_tokens = true;
  bare.tokens = e->tokens;
  const Agreement b = compare_tokens(ids, bytes, bare);
  EXPECT_TRUE(std::isnan(b.endpoint_gap));
  EXPECT_TRUE(std::isnan(b.local_gap));
}

TEST(ProbeCompare, JsonTextReplacesIllFormedBytes) {
  EXPECT_EQ(as_json_text("ok"), "ok");
  EXPECT_EQ(as_json_text("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(as_json_text("a\xFF"), "a\xEF\xBF\xBD");
}

}  // namespace
