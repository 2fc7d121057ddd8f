// The login page keeps the chat route the browser was sent here from: a fragment
// (#/s/<session>) never reaches the server, so Django's ?next= holds the path alone,
// and signing in opened the first screen instead of the conversation. The fragment
// the browser kept across the redirect is added to the form's next, when it is a
// route of the chat page and next is a path of this site.

const ROUTE = /^#\/s\/[A-Za-z0-9_-]{1,64}$/;

const next = document.querySelector('.login-form input[name="next"]');
if (next && ROUTE.test(location.hash)) {
  const path = next.value || "/";
  if (path.startsWith("/") && !path.startsWith("//") && !path.includes("#")) {
    next.value = path + location.hash;
  }
}
