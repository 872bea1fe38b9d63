/* The vendor declares the aclnn tensor types in aclnn/acl_meta.h; qmoe keeps them in
 * aclnnop/aclnn_base.h. This forwarding header lets programs include either path. */
#ifndef QMOE_ACLNN_ACL_META_H
#define QMOE_ACLNN_ACL_META_H
#include "aclnnop/aclnn_base.h"
#endif
