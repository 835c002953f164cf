//! rtnetlink requests, one module per message. Numbers from include/uapi/linux/rtnetlink.h and
//! if_link.h, kept as our own named table like ethtool's.

pub mod link;
