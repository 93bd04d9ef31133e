//! Who may reach Wharf's local HTTP servers — `wharf web` / `wharf serve`
//! (`wharf-serve`) and `wharf mcp serve --http` (`wharf-mcp-server`) — one
//! set of rules for both:
//!
//! - [`check_bind`]: loopback by default; a non-loopback address needs
//!   `allow_remote` **and** a configured token (at least
//!   [`MIN_TOKEN_LEN`] characters).
//! - [`guard`], the middleware: every request needs the token
//!   (`Authorization: Bearer TOKEN`, `X-Wharf-Token: TOKEN`, or the
//!   `HttpOnly`, `SameSite=Strict` cookie set by opening `/?token=TOKEN`);
//!   the `Host` header must name the server (DNS rebinding); on
//!   state-changing requests and event streams a foreign `Origin` or
//!   `Sec-Fetch-Site: cross-site` is refused; answers carry a strict
//!   Content-Security-Policy, `nosniff`, `no-referrer`, `DENY` framing and
//!   `no-store`.

mod access;
mod guard;

pub use access::{
    Access, AccessError, BindRequest, MIN_TOKEN_LEN, allowed_hosts, check_bind, check_token, random_token, shown_addr,
};
pub use guard::guard;
