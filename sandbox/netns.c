/* Loopback in a fresh network namespace.  No dump of the link list (that is most of
 * libnl's cost, reference/environment.md §1.4): in a new namespace lo is always
 * ifindex 1, so one RTM_NEWLINK change request is enough. */
#include "kcage/sandbox_parts.h"

#include <errno.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>

int kc_sandbox_lo_up(kc_error *err) {
  struct nl_sock *sk = nl_socket_alloc();
  if (!sk)
    return kc_error_set(err, ENOMEM, "netlink socket");
  int rc = nl_connect(sk, NETLINK_ROUTE);
  if (rc < 0) {
    nl_socket_free(sk);
    return kc_error_set(err, 0, "netlink connect: %s", nl_geterror(rc));
  }
  struct rtnl_link *orig = rtnl_link_alloc(), *change = rtnl_link_alloc();
  if (!orig || !change) {
    rc = -NLE_NOMEM;
  } else {
    rtnl_link_set_ifindex(orig, 1);
    rtnl_link_set_flags(change, IFF_UP);
    rc = rtnl_link_change(sk, orig, change, 0);
  }
  if (orig)
    rtnl_link_put(orig);
  if (change)
    rtnl_link_put(change);
  nl_socket_free(sk);
  if (rc < 0)
    return kc_error_set(err, 0, "bring lo up: %s", nl_geterror(rc));
  return 0;
}
