// A stand-in for wildcard DNS, for the E2B_DOMAIN test only: names under
// AIRLOCK_TEST_DOMAIN resolve to AIRLOCK_TEST_ADDR, everything else as
// usual. The SDKs are not touched; the name lookup of the process is.
const dns = require('node:dns')
const domain = process.env.AIRLOCK_TEST_DOMAIN
const addr = process.env.AIRLOCK_TEST_ADDR
const lookup = dns.lookup
dns.lookup = function (host, opts, cb) {
  if (typeof opts === 'function') {
    cb = opts
    opts = {}
  }
  if (domain && (host === domain || host.endsWith('.' + domain))) {
    if (opts && opts.all) return process.nextTick(cb, null, [{ address: addr, family: 4 }])
    return process.nextTick(cb, null, addr, 4)
  }
  return lookup.call(this, host, opts, cb)
}
